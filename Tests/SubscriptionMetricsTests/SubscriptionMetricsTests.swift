import AppStoreNotifications
@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import SubscriptionMetrics
import TestSigning
import TestSupport
import Testing
import TestGates

/// A book of minted subscriptions (January to April 2026) whose every metric was computed by hand from the
/// definitions in docs/metrics.md (RevenueCat's), stored through the worker's own batch path, in order and shuffled.
///
/// The book (all at 12:00 UTC; USD 9.99 `pro.monthly` unless said; Production unless said):
/// - S1  paid Jan 5, renews Feb 5, Mar 5, Apr 5; a refund request for the April period declined Apr 10.
/// - S2  free trial Jan 10–17, converts (paid Jan 17, renews Feb 17), expires voluntarily Mar 17.
/// - S3  free trial Jan 20–27, abandoned (expires Jan 27).
/// - S4  free trial Feb 1–8, converts Feb 8, that period refunded Feb 20 (the conversion does not count).
/// - S5  paid Jan 1, billing retry from Feb 1 (no grace), recovered Feb 10, renews Mar 10, Apr 10.
/// - S6  paid Jan 15, grace period from Feb 15 until Mar 3, recovered in grace Feb 20, auto-renew off Mar 1, expires Mar 20.
/// - S7  paid Feb 3, billing retry from Mar 3, lost (expired Apr 2).
/// - S8  paid Jan 8, upgrades Jan 25 to `pro.yearly` (USD 99.99 a year).
/// - S9  paid Feb 12, downgrades (from the renewal) to `basic.monthly` USD 4.99: renews Mar 12, Apr 12.
/// - S10 paid Jan 3, renews Feb 3, Mar 3, Apr 3; the January period refunded Mar 15.
/// - S11 paid Mar 1; consumption request Mar 5, refunded Mar 10, refund reversed Mar 20; renews Apr 1.
/// - S12 family-shared `pro.monthly` Jan 5, renews Feb 5, Mar 5, Apr 5.
/// - S13 `pro.yearly` on the monthly billing plan (12-month commitment), USD 8.99 a month: Feb 1, Mar 1, Apr 1.
/// - S14 EUR 9.49 (storefront DEU) Feb 14, renews Mar 14, Apr 14; EUR→USD 1.10 from Jan 1, 1.20 from Mar 1.
/// - S15 GBP 7.99 Apr 20 (no GBP rate: left out of money sums, counted as unconverted).
/// - S16 Sandbox, paid Jan 5 (must never show in Production figures).
@Suite("Subscription metrics against a real PostgreSQL", .serialized, .requiresPostgres)
struct SubscriptionMetricsTests: MintedSuite {
    static let logger = quietLogger("metrics-tests")

    /// The minted app's Sandbox notifications (the same chain; the verifier accepts both environments).
    var sandboxMinter: NotificationMinter { NotificationMinter(chain: minter.chain, environment: .sandbox) }

    // MARK: - The book

    static func at(_ month: Int, _ day: Int, year: Int = 2026, hour: Int = 12) -> Int64 {
        TestDates.milliseconds(String(format: "%04d-%02d-%02dT%02d:00:00Z", year, month, day, hour))
    }

    struct Book {
        var events: [(NotificationMinter.SubscriptionEvent, sandbox: Bool)] = []

        /// A notification about subscription `sub`'s transaction `tx` (the period [from, to)), signed at `signed`.
        mutating func add(_ sub: Int, _ type: String, _ subtype: String? = nil, signed: Int64, tx: Int, from: Int64, to: Int64, status: Int32 = 1,
                          sandbox: Bool = false, _ configure: (inout NotificationMinter.SubscriptionEvent) -> Void = { _ in }) {
            var event = NotificationMinter.SubscriptionEvent(
                notificationType: type, subtype: subtype, notificationUUID: deterministicUUID(500_000 + sub * 100 + events.count),
                signedDate: signed, originalTransactionId: String(4_100_000_000 + sub), transactionId: String(4_200_000_000 + sub * 100 + tx),
                purchaseDate: from, expiresDate: to, appAccountToken: deterministicUUID(600_000 + sub))
            event.status = status
            if status == 2 { event.autoRenewStatus = 0 }
            configure(&event)
            events.append((event, sandbox))
        }

        /// A subscription renewing month after month: SUBSCRIBED for the first, DID_RENEW for the others.
        mutating func monthly(_ sub: Int, months: [(Int, Int)], firstTx: Int = 1, firstType: String = "SUBSCRIBED", firstSubtype: String? = "INITIAL_BUY",
                              _ configure: @escaping (inout NotificationMinter.SubscriptionEvent) -> Void = { _ in }) {
            for (index, (month, day)) in months.enumerated() {
                let from = SubscriptionMetricsTests.at(month, day)
                let to = month == 12 ? SubscriptionMetricsTests.at(1, day, year: 2027) : SubscriptionMetricsTests.at(month + 1, day)
                add(sub, index == 0 ? firstType : "DID_RENEW", index == 0 ? firstSubtype : nil, signed: from, tx: firstTx + index, from: from, to: to, configure)
            }
        }
    }

    static func book() -> Book {
        var book = Book()
        func at(_ month: Int, _ day: Int, year: Int = 2026) -> Int64 { SubscriptionMetricsTests.at(month, day, year: year) }
        func trial(_ event: inout NotificationMinter.SubscriptionEvent) {
            event.price = 0
            event.offerType = 1
            event.offerDiscountType = "FREE_TRIAL"
            event.offerPeriod = "P1W"
        }
        // S1
        book.monthly(1, months: [(1, 5), (2, 5), (3, 5), (4, 5)])
        book.add(1, "REFUND_DECLINED", signed: at(4, 10), tx: 4, from: at(4, 5), to: at(5, 5))
        // S2
        book.add(2, "SUBSCRIBED", "INITIAL_BUY", signed: at(1, 10), tx: 0, from: at(1, 10), to: at(1, 17), trial)
        book.monthly(2, months: [(1, 17), (2, 17)], firstType: "DID_RENEW", firstSubtype: nil)
        book.add(2, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: at(3, 1), tx: 2, from: at(2, 17), to: at(3, 17)) { $0.autoRenewStatus = 0 }
        book.add(2, "EXPIRED", "VOLUNTARY", signed: at(3, 17), tx: 2, from: at(2, 17), to: at(3, 17), status: 2)
        // S3
        book.add(3, "SUBSCRIBED", "INITIAL_BUY", signed: at(1, 20), tx: 0, from: at(1, 20), to: at(1, 27), trial)
        book.add(3, "EXPIRED", "VOLUNTARY", signed: at(1, 27), tx: 0, from: at(1, 20), to: at(1, 27), status: 2) {
            trial(&$0)
        }
        // S4
        book.add(4, "SUBSCRIBED", "INITIAL_BUY", signed: at(2, 1), tx: 0, from: at(2, 1), to: at(2, 8), trial)
        book.add(4, "DID_RENEW", signed: at(2, 8), tx: 1, from: at(2, 8), to: at(3, 8))
        book.add(4, "REFUND", signed: at(2, 20), tx: 1, from: at(2, 8), to: at(3, 8), status: 5) {
            $0.revocationDate = at(2, 20)
            $0.revocationReason = 0
        }
        // S5
        book.add(5, "SUBSCRIBED", "INITIAL_BUY", signed: at(1, 1), tx: 1, from: at(1, 1), to: at(2, 1))
        book.add(5, "DID_FAIL_TO_RENEW", signed: at(2, 1), tx: 1, from: at(1, 1), to: at(2, 1), status: 3) { $0.isInBillingRetryPeriod = true }
        book.monthly(5, months: [(2, 10), (3, 10), (4, 10)], firstTx: 2, firstType: "DID_RENEW", firstSubtype: "BILLING_RECOVERY")
        // S6
        book.add(6, "SUBSCRIBED", "INITIAL_BUY", signed: at(1, 15), tx: 1, from: at(1, 15), to: at(2, 15))
        book.add(6, "DID_FAIL_TO_RENEW", "GRACE_PERIOD", signed: at(2, 15), tx: 1, from: at(1, 15), to: at(2, 15), status: 4) {
            $0.isInBillingRetryPeriod = true
            $0.gracePeriodExpiresDate = at(3, 3)
        }
        book.add(6, "DID_RENEW", "BILLING_RECOVERY", signed: at(2, 20), tx: 2, from: at(2, 20), to: at(3, 20))
        book.add(6, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", signed: at(3, 1), tx: 2, from: at(2, 20), to: at(3, 20)) { $0.autoRenewStatus = 0 }
        book.add(6, "EXPIRED", "VOLUNTARY", signed: at(3, 20), tx: 2, from: at(2, 20), to: at(3, 20), status: 2)
        // S7
        book.add(7, "SUBSCRIBED", "INITIAL_BUY", signed: at(2, 3), tx: 1, from: at(2, 3), to: at(3, 3))
        book.add(7, "DID_FAIL_TO_RENEW", signed: at(3, 3), tx: 1, from: at(2, 3), to: at(3, 3), status: 3) { $0.isInBillingRetryPeriod = true }
        book.add(7, "EXPIRED", "BILLING_RETRY", signed: at(4, 2), tx: 1, from: at(2, 3), to: at(3, 3), status: 2)
        // S8
        book.add(8, "SUBSCRIBED", "INITIAL_BUY", signed: at(1, 8), tx: 1, from: at(1, 8), to: at(2, 8))
        book.add(8, "DID_CHANGE_RENEWAL_PREF", "UPGRADE", signed: at(1, 25), tx: 2, from: at(1, 25), to: at(1, 25, year: 2027)) {
            $0.productId = "com.example.pipeline.pro.yearly"
            $0.price = 99_990
        }
        // S9
        book.add(9, "SUBSCRIBED", "INITIAL_BUY", signed: at(2, 12), tx: 1, from: at(2, 12), to: at(3, 12))
        book.add(9, "DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", signed: at(2, 20), tx: 1, from: at(2, 12), to: at(3, 12)) {
            $0.autoRenewProductId = "com.example.pipeline.basic.monthly"
        }
        book.monthly(9, months: [(3, 12), (4, 12)], firstTx: 2, firstType: "DID_RENEW", firstSubtype: nil) {
            $0.productId = "com.example.pipeline.basic.monthly"
            $0.price = 4_990
        }
        // S10
        book.monthly(10, months: [(1, 3), (2, 3), (3, 3), (4, 3)])
        book.add(10, "REFUND", signed: at(3, 15), tx: 1, from: at(1, 3), to: at(2, 3)) {
            $0.revocationDate = at(3, 15)
            $0.revocationReason = 0
        }
        // S11
        book.add(11, "SUBSCRIBED", "INITIAL_BUY", signed: at(3, 1), tx: 1, from: at(3, 1), to: at(4, 1))
        book.add(11, "CONSUMPTION_REQUEST", signed: at(3, 5), tx: 1, from: at(3, 1), to: at(4, 1))
        book.add(11, "REFUND", signed: at(3, 10), tx: 1, from: at(3, 1), to: at(4, 1), status: 5) {
            $0.revocationDate = at(3, 10)
            $0.revocationReason = 0
        }
        book.add(11, "REFUND_REVERSED", signed: at(3, 20), tx: 1, from: at(3, 1), to: at(4, 1))
        book.add(11, "DID_RENEW", signed: at(4, 1), tx: 2, from: at(4, 1), to: at(5, 1))
        // S12
        book.monthly(12, months: [(1, 5), (2, 5), (3, 5), (4, 5)]) {
            $0.inAppOwnershipType = "FAMILY_SHARED"
            $0.appAccountToken = ""
        }
        // S13
        book.monthly(13, months: [(2, 1), (3, 1), (4, 1)]) {
            $0.productId = "com.example.pipeline.pro.yearly"
            $0.price = 8_990
            $0.billingPlanType = "MONTHLY"
            $0.commitmentInfo = JSONObject([
                "billingPeriodNumber": .number(JSONNumber(1)), "totalBillingPeriods": .number(JSONNumber(12)),
                "commitmentPrice": .number(JSONNumber(107_880)),
            ])
        }
        // S14
        book.monthly(14, months: [(2, 14), (3, 14), (4, 14)]) {
            $0.currency = "EUR"
            $0.price = 9_490
            $0.storefront = "DEU"
        }
        // S15
        book.monthly(15, months: [(4, 20)]) {
            $0.currency = "GBP"
            $0.price = 7_990
            $0.storefront = "GBR"
        }
        // S16
        book.add(16, "SUBSCRIBED", "INITIAL_BUY", signed: at(1, 5), tx: 1, from: at(1, 5), to: at(2, 5), sandbox: true)
        return book
    }

    static let rates = [
        ExchangeRate(date: "2026-01-01", currency: "EUR", reportingCurrency: "USD", rate: "1.10"),
        ExchangeRate(date: "2026-03-01", currency: "EUR", reportingCurrency: "USD", rate: "1.20"),
    ]

    func records(_ book: Book) async throws -> [StoredNotification] {
        var records: [StoredNotification] = []
        for (index, (event, sandbox)) in book.events.enumerated() {
            let signed = (sandbox ? sandboxMinter : minter).signedNotification(event)
            records.append(StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0,
                                              kafkaOffset: Int64(index)))
        }
        return records
    }

    /// A store on a database of its own (created for the test, migrated), with the book's rates loaded.
    func withStore(_ body: (EntitlementStore, PostgresClient) async throws -> Void) async throws {
        try await withMigratedStore("metrics", logger: Self.logger) { store, client in
            #expect(try await MetricsStore(client: store.client, logger: store.logger).loadExchangeRates(Self.rates) == 2)
            try await body(store, client)
        }
    }

    static let fourMonths = MetricQuery(from: TestDates.date("2026-01-01T00:00:00Z"), to: TestDates.date("2026-05-01T00:00:00Z"), bucket: .month)

    /// Every metric of the book, by name, over January to April by month.
    func allMetrics(_ store: EntitlementStore) async throws -> [SubscriptionMetric: MetricTable] {
        var tables: [SubscriptionMetric: MetricTable] = [:]
        for metric in SubscriptionMetric.allCases { tables[metric] = try await MetricsStore(client: store.client, logger: store.logger).metric(metric, Self.fourMonths) }
        return tables
    }

    /// The column `column` of every row, in order.
    func column(_ table: MetricTable?, _ column: String) -> [String?] {
        guard let table else { return [] }
        return table.rows.indices.map { table.value(column, row: $0) }
    }

    // MARK: - Tests

    @Test("every metric of the book equals its hand-computed value")
    func handComputed() async throws {
        let records = try await records(Self.book())
        try await withStore { store, _ in
            _ = try await store.store(records)
            let m = try await allMetrics(store)

            let active = m[.activeSubscriptions]
            #expect(column(active, "bucket_start") == ["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"])
            #expect(column(active, "bucket_end") == ["2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"])
            #expect(column(active, "active_paid") == ["6", "10", "8", "9"])
            #expect(column(active, "active_trials") == ["0", "0", "0", "0"])
            #expect(column(active, "active_family_shared") == ["1", "1", "1", "1"])

            let mrr = m[.mrr]
            #expect(column(mrr, "mrr") == ["58.28", "97.69", "73.66", "73.66"])
            #expect(column(mrr, "arr") == ["699.39", "1172.30", "883.93", "883.93"])
            #expect(column(mrr, "active_paid") == ["6", "10", "8", "9"])
            #expect(column(mrr, "unconverted") == ["0", "0", "0", "1"])
            #expect(column(mrr, "currency") == ["USD", "USD", "USD", "USD"])

            let new = m[.newSubscriptions]
            #expect(column(new, "new_trials") == ["2", "1", "0", "0"])
            #expect(column(new, "new_paid") == ["6", "5", "1", "1"])
            #expect(column(new, "new_family_shared") == ["1", "0", "0", "0"])

            let trials = m[.trialConversion]
            #expect(column(trials, "trials") == ["2", "1", "0", "0"])
            #expect(column(trials, "converted") == ["1", "0", "0", "0"])
            #expect(column(trials, "pending") == ["0", "0", "0", "0"])
            #expect(column(trials, "abandoned") == ["1", "1", "0", "0"])
            #expect(column(trials, "conversion_rate") == ["0.5000", "0.0000", nil, nil])

            let churn = m[.churn]
            #expect(column(churn, "active_at_start") == ["0", "6", "10", "8"])
            // S5's billing retry churned it on Feb 1, but it resubscribed on Feb 10: not lost in February.
            #expect(column(churn, "churned") == ["0", "0", "3", "0"])
            #expect(column(churn, "churn_rate") == [nil, "0.0000", "0.3000", "0.0000"])
            #expect(column(churn, "resubscribed") == ["0", "1", "0", "0"])

            let movement = m[.mrrMovement]
            #expect(column(movement, "new_mrr") == ["59.94", "49.40", "9.99", "0.00"])
            #expect(column(movement, "resubscription_mrr") == ["0.00", "9.99", "0.00", "0.00"])
            #expect(column(movement, "churned_mrr") == ["0.00", "19.98", "29.97", "0.00"])
            #expect(column(movement, "net_mrr") == ["59.94", "39.41", "-19.98", "0.00"])
            #expect(column(movement, "unconverted") == ["0", "0", "0", "1"])

            let refunds = m[.refunds]
            #expect(column(refunds, "paid_periods") == ["7", "10", "7", "8"])
            #expect(column(refunds, "refunded") == ["1", "1", "0", "0"])
            #expect(column(refunds, "refund_rate") == ["0.1429", "0.1000", "0.0000", "0.0000"])
            #expect(column(refunds, "refunded_amount") == ["9.99", "9.99", "0.00", "0.00"])

            let requests = m[.refundRequests]
            #expect(column(requests, "requested") == ["0", "0", "1", "0"])
            #expect(column(requests, "granted") == ["0", "1", "2", "0"])
            #expect(column(requests, "declined") == ["0", "0", "0", "1"])
            #expect(column(requests, "reversed") == ["0", "0", "1", "0"])

            let retention = try #require(m[.retention])
            let cohorts = retention.rows.indices.map { row in
                [retention.value("bucket_start", row: row)?.prefix(7).description ?? "", retention.value("period", row: row) ?? "",
                 retention.value("cohort", row: row) ?? "", retention.value("retained", row: row) ?? "", retention.value("retention", row: row) ?? ""]
            }
            #expect(cohorts == [
                ["2026-01", "1", "6", "6", "1.0000"], ["2026-01", "2", "6", "6", "1.0000"], ["2026-01", "3", "6", "3", "0.5000"],
                ["2026-01", "4", "6", "2", "0.3333"],
                ["2026-02", "1", "5", "4", "0.8000"], ["2026-02", "2", "5", "3", "0.6000"], ["2026-02", "3", "5", "3", "0.6000"],
                ["2026-03", "1", "1", "1", "1.0000"], ["2026-03", "2", "1", "1", "1.0000"],
                ["2026-04", "1", "1", "1", "1.0000"],
            ])

            // A day inside S2's trial: the trial is active, and so are the four paid subscriptions begun by then.
            var day = Self.fourMonths
            (day.from, day.to, day.bucket) = (TestDates.date("2026-01-12T00:00:00Z"), TestDates.date("2026-01-13T00:00:00Z"), .day)
            let onJan12 = try await MetricsStore(client: store.client, logger: store.logger).metric(.activeSubscriptions, day)
            #expect(onJan12.rows == [["2026-01-12T00:00:00Z", "2026-01-13T00:00:00Z", "4", "1", "1"]])

            // Filters: one product, one storefront, another currency, and Sandbox on its own.
            var filtered = Self.fourMonths
            filtered.productId = "com.example.pipeline.basic.monthly"
            #expect(column(try await MetricsStore(client: store.client, logger: store.logger).metric(.mrr, filtered), "mrr") == ["0.00", "0.00", "4.99", "4.99"])
            filtered = Self.fourMonths
            filtered.storefront = "DEU"
            #expect(column(try await MetricsStore(client: store.client, logger: store.logger).metric(.mrr, filtered), "mrr") == ["0.00", "10.44", "11.39", "11.39"])
            filtered.currency = "EUR"
            #expect(column(try await MetricsStore(client: store.client, logger: store.logger).metric(.mrr, filtered), "mrr") == ["0.00", "9.49", "9.49", "9.49"])
            filtered = Self.fourMonths
            filtered.environment = "Sandbox"
            #expect(column(try await MetricsStore(client: store.client, logger: store.logger).metric(.activeSubscriptions, filtered), "active_paid") == ["1", "0", "0", "0"])

            // The catalog was filled from observation (intro offers and the commitment plan's months left out).
            let catalog = Dictionary(uniqueKeysWithValues: try await MetricsStore(client: store.client, logger: store.logger).productCatalog().map { ($0.productId, $0.duration) })
            #expect(catalog == ["com.example.pipeline.pro.monthly": "P1M", "com.example.pipeline.pro.yearly": "P1Y", "com.example.pipeline.basic.monthly": "P1M"])
            // A manual duration wins over observation, and changes the normalisation.
            try await MetricsStore(client: store.client, logger: store.logger).setProductDuration(productId: "com.example.pipeline.basic.monthly", duration: "P3M")
            filtered = Self.fourMonths
            filtered.productId = "com.example.pipeline.basic.monthly"
            #expect(column(try await MetricsStore(client: store.client, logger: store.logger).metric(.mrr, filtered), "mrr") == ["0.00", "0.00", "1.66", "1.66"])
        }
    }

    @Test("the same figures whichever order the notifications arrive in, and after a replay")
    func orderIndependent() async throws {
        let records = try await records(Self.book())
        var inOrder: [SubscriptionMetric: MetricTable] = [:]
        try await withStore { store, _ in
            _ = try await store.store(records)
            inOrder = try await allMetrics(store)
        }
        #expect(inOrder.count == SubscriptionMetric.allCases.count)
        for seed in [1, 2] {
            var generator = SplitMix64(seed: UInt64(seed))
            let shuffled = records.shuffled(using: &generator)
            try await withStore { store, _ in
                // Batches of up to 7, as a worker's polls would cut them, then the whole stream again (a replay).
                var index = 0
                while index < shuffled.count {
                    let size = Int(generator.next() % 7) + 1
                    _ = try await store.store(Array(shuffled[index..<min(index + size, shuffled.count)]))
                    index += size
                }
                _ = try await store.store(shuffled)
                let again = try await allMetrics(store)
                for metric in SubscriptionMetric.allCases {
                    #expect(again[metric] == inOrder[metric], "\(metric.rawValue) with shuffle seed \(seed)")
                }
            }
        }
    }
}
