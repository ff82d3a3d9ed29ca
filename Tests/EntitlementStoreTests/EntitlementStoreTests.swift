import AppStoreNotifications
@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestSupport
import Testing
import TestGates

@Suite("Entitlement store against a real PostgreSQL", .serialized, .requiresPostgres)
struct EntitlementStoreTests: MintedSuite {
    static let logger = quietLogger("store-tests")
    /// Runs `body` with a store on a database of its own (created for the test, migrated).
    func withStore(_ body: (EntitlementStore, PostgresClient) async throws -> Void) async throws {
        try await withMigratedStore("store", logger: Self.logger, body)
    }

    func notification(_ type: String, _ subtype: String? = nil, day: Int64, status: Int32 = 1) async throws -> StoredNotification {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 7 * 4, signedDate: Self.start + day * Self.day, type: type, subtype: subtype)
        event.notificationUUID = deterministicUUID(Int(day) * 1_000 + type.count)
        event.transactionId = String(3_000_000 + day)
        event.expiresDate = Self.start + (day + 30) * Self.day
        event.status = status
        if status == 2 { event.autoRenewStatus = 0 }
        let signed = minter.signedNotification(event)
        return StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: day)
    }

    func entitlementRow(_ client: PostgresClient) async throws -> (status: String, lastType: String, active: Bool)? {
        let rows = try await client.query("SELECT status, last_notification_type, is_active FROM entitlements_now", logger: Self.logger)
        var result: (String, String, Bool)?
        for try await row in rows.decode((String, String, Bool).self) { result = row }
        return result
    }

    func count(_ table: String, _ client: PostgresClient) async throws -> Int {
        var value = 0
        for try await count in try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*)::int FROM \(table)"), logger: Self.logger).decode(Int.self) {
            value = count
        }
        return value
    }

    @Test("a lifecycle in one batch: archived, deduplicated, entitlement follows")
    func lifecycle() async throws {
        let subscribed = try await notification("SUBSCRIBED", "INITIAL_BUY", day: 0)
        let renewed = try await notification("DID_RENEW", day: 30)
        let expired = try await notification("EXPIRED", "VOLUNTARY", day: 60, status: 2)
        try await withStore { store, client in
            let outcome = try await store.store([subscribed, renewed, renewed, expired])
            #expect(outcome == BatchOutcome(applied: 3, duplicates: 1, entitlementsUpdated: 3, stale: 0, events: 3), "granted, renewed, revoked")
            let row = try await entitlementRow(client)
            #expect(row?.status == "expired" && row?.lastType == "EXPIRED" && row?.active == false)
            #expect(try await count("notifications", client) == 3)
            #expect(try await count("transactions", client) == 3)
            // Redelivery of the whole batch (a replay) changes nothing.
            #expect(try await store.store([subscribed, renewed, expired]) == BatchOutcome(applied: 0, duplicates: 3, entitlementsUpdated: 0, stale: 0))
            #expect(try await count("notifications", client) == 3)
        }
    }

    @Test("out of order: an older renewal after a newer expiry leaves the expiry")
    func outOfOrder() async throws {
        let renewed = try await notification("DID_RENEW", day: 30)
        let expired = try await notification("EXPIRED", "VOLUNTARY", day: 60, status: 2)
        try await withStore { store, client in
            #expect(try await store.store([expired]).entitlementsUpdated == 1)
            let late = try await store.store([renewed])
            #expect(late.applied == 1 && late.stale == 1 && late.entitlementsUpdated == 0, "archived, but state kept")
            #expect(try await entitlementRow(client)?.status == "expired")
            #expect(try await count("notifications", client) == 2)
        }
    }

    @Test("an active subscription reads as active until its expiry")
    func active() async throws {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 99, signedDate: Int64(Date().timeIntervalSince1970 * 1000), type: "SUBSCRIBED", subtype: "INITIAL_BUY")
        event.expiresDate = event.signedDate + 30 * Self.day
        let signed = minter.signedNotification(event)
        let record = StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed)
        try await withStore { store, client in
            _ = try await store.store([record])
            let row = try await entitlementRow(client)
            #expect(row?.status == "active" && row?.active == true)
        }
    }

    // MARK: - Entitlement correctness through the store (the SQL guard and the view included)

    /// A notification of subscription `subscription` (seed), configured freely.
    func stored(_ type: String, _ subtype: String? = nil, day: Int64, subscription: Int = 11, uuid: Int, configure: (inout NotificationMinter.SubscriptionEvent) -> Void = { _ in }) async throws -> StoredNotification {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: subscription * 4, signedDate: Self.start + day * Self.day, type: type, subtype: subtype)
        event.notificationUUID = deterministicUUID(uuid)
        event.transactionId = String(6_000_000 + subscription * 100 + 1)
        event.purchaseDate = Self.start
        event.expiresDate = Self.start + 30 * Self.day
        configure(&event)
        let signed = minter.signedNotification(event)
        return StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: Int64(uuid))
    }

    func rows(_ client: PostgresClient, view: String = "entitlements_now") async throws -> [String: (status: String, expires: Date?, revocation: Date?, active: Bool)] {
        var result: [String: (String, Date?, Date?, Bool)] = [:]
        let query = PostgresQuery(unsafeSQL: "SELECT original_transaction_id, status, expires_at, revocation_date, is_active FROM \(view)")
        for try await (id, status, expires, revocation, active) in try await client.query(query, logger: Self.logger).decode((String, String, Date?, Date?, Bool).self) {
            result[id] = (status, expires, revocation, active)
        }
        return result
    }

    @Test("a REFUND of an older renewal with status 1 keeps the paid period; tied signedDates are ordered by the SQL guard too")
    func olderRefundAndTies() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let startDay = (now - Self.start) / Self.day - 40  // day 40 of the subscription is today
        func day(_ d: Int64) -> Int64 { startDay + d }
        let subscribed = try await stored("SUBSCRIBED", "INITIAL_BUY", day: day(0), uuid: 1) {
            $0.purchaseDate = Self.start + day(0) * Self.day
            $0.expiresDate = Self.start + day(30) * Self.day
        }
        let renewed = try await stored("DID_RENEW", day: day(30), uuid: 2) {
            $0.transactionId = "6001102"
            $0.purchaseDate = Self.start + day(30) * Self.day
            $0.expiresDate = Self.start + day(60) * Self.day
        }
        let olderRefund = try await stored("REFUND", day: day(39), uuid: 3) {
            $0.purchaseDate = Self.start + day(0) * Self.day
            $0.expiresDate = Self.start + day(30) * Self.day
            $0.renewalDate = Self.start + day(60) * Self.day
            $0.revocationDate = Self.start + day(39) * Self.day
            $0.revocationReason = 0
        }
        try await withStore { store, client in
            _ = try await store.store([subscribed, renewed])
            _ = try await store.store([olderRefund])
            let row = try #require(try await rows(client)["2000000000000011"])
            #expect(row.status == "active" && row.active && row.revocation == nil, "\(row)")
            #expect(row.expires.map { Int64($0.timeIntervalSince1970 * 1000) } == Self.start + day(60) * Self.day)
            // The refunded transaction is recorded where it belongs.
            var refunded = 0
            for try await count in try await client.query("SELECT count(*)::int FROM transactions WHERE transaction_id = '6001101' AND revocation_date IS NOT NULL AND revocation_percentage = 100000", logger: Self.logger).decode(Int.self) { refunded = count }
            #expect(refunded == 1)

            // A REFUND (status 5) tying with an AUTO_RENEW_DISABLED: refunded, whichever batch comes first.
            let refund = try await stored("REFUND", day: day(40), uuid: 90) {
                $0.transactionId = "6001102"
                $0.purchaseDate = Self.start + day(30) * Self.day
                $0.expiresDate = Self.start + day(60) * Self.day
                $0.status = 5
                $0.revocationDate = Self.start + day(40) * Self.day
                $0.revocationReason = 1
            }
            let disabled = try await stored("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", day: day(40), uuid: 91) {
                $0.transactionId = "6001102"
                $0.purchaseDate = Self.start + day(30) * Self.day
                $0.expiresDate = Self.start + day(60) * Self.day
                $0.autoRenewStatus = 0
            }
            let outcome = try await store.store([refund])
            #expect(outcome.entitlementsUpdated == 1)
            #expect(try await store.store([disabled]).stale == 1, "ordered before the refund (lower status severity)")
            let after = try #require(try await rows(client)["2000000000000011"])
            #expect(after.status == "refunded" && !after.active && after.revocation != nil, "\(after)")
        }
    }

    @Test("family: SUBSCRIBED for purchaser and member, then REVOKE changes only the member's row; MIGRATION supersedes the previous row")
    func familyAndMigration() async throws {
        let future = (Int64(Date().timeIntervalSince1970 * 1000) - Self.start) / Self.day + 20
        let purchaser = try await stored("SUBSCRIBED", "INITIAL_BUY", day: 0, subscription: 21, uuid: 10) { $0.expiresDate = Self.start + future * Self.day }
        let member = try await stored("SUBSCRIBED", "INITIAL_BUY", day: 0, subscription: 22, uuid: 11) {
            $0.inAppOwnershipType = "FAMILY_SHARED"
            $0.expiresDate = Self.start + future * Self.day
        }
        let revoke = try await stored("REVOKE", day: 2, subscription: 22, uuid: 12) {
            $0.inAppOwnershipType = "FAMILY_SHARED"
            $0.expiresDate = Self.start + future * Self.day
            $0.status = 5
            $0.revocationDate = Self.start + 2 * Self.day
            $0.revocationType = "FAMILY_REVOKE"
        }
        var migration = try await stored("MIGRATION", day: 3, subscription: 23, uuid: 13) {
            $0.expiresDate = Self.start + future * Self.day
            $0.previousOriginalTransactionId = "2000000000000021"  // the purchaser's subscription moves into a bundle
        }
        _ = migration.signedPayload
        try await withStore { store, client in
            _ = try await store.store([purchaser, member])
            _ = try await store.store([revoke])
            var all = try await rows(client)
            #expect(all["2000000000000021"]?.status == "active" && all["2000000000000021"]?.active == true)
            #expect(all["2000000000000022"]?.status == "revoked" && all["2000000000000022"]?.active == false)
            migration.kafkaOffset = 99
            _ = try await store.store([migration])
            all = try await rows(client)
            #expect(all["2000000000000023"]?.active == true)
            #expect(all["2000000000000021"]?.status == "migrated" && all["2000000000000021"]?.active == false, "the pre-migration row stops granting access")
            var link = ""
            for try await value in try await client.query("SELECT superseded_by FROM entitlements WHERE original_transaction_id = '2000000000000021'", logger: Self.logger).decode(String.self) { link = value }
            #expect(link == "2000000000000023")
        }
    }

    @Test("is_active in the view for every status, the grace backstop, the leeway setting, and the production-only view")
    func viewEveryStatus() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try await withStore { store, client in
            // One row per status, inserted as the store writes them, expiring in the future.
            var rows: [EntitlementStore.EntitlementRow] = []
            for (index, status) in EntitlementState.Status.allCases.enumerated() {
                var state = EntitlementState(environment: index % 2 == 0 ? "Production" : "Sandbox", bundleId: "b", originalTransactionId: "status-\(status.rawValue)", status: status, lastNotificationType: "X", lastSignedDate: Timestamp(millisecondsSince1970: now))
                state.expiresAt = Timestamp(millisecondsSince1970: now + Self.day)
                rows.append(try EntitlementStore.entitlementRow(state))
            }
            // Grace without a date, lapsed yesterday: still within Apple's longest grace period.
            var grace = EntitlementState(environment: "Production", bundleId: "b", originalTransactionId: "grace-no-date", status: .gracePeriod, lastNotificationType: "X", lastSignedDate: Timestamp(millisecondsSince1970: now))
            grace.expiresAt = Timestamp(millisecondsSince1970: now - Self.day)
            rows.append(try EntitlementStore.entitlementRow(grace))
            // Lapsed a minute ago: inside the default leeway (2 minutes), outside a zero one.
            var late = EntitlementState(environment: "Production", bundleId: "b", originalTransactionId: "renewal-late", status: .active, lastNotificationType: "X", lastSignedDate: Timestamp(millisecondsSince1970: now))
            late.expiresAt = Timestamp(millisecondsSince1970: now - 60_000)
            rows.append(try EntitlementStore.entitlementRow(late))
            try await client.query(EntitlementStore.entitlementStatement(rows), logger: Self.logger)

            let all = try await self.rows(client)
            for status in EntitlementState.Status.allCases {
                #expect(all["status-\(status.rawValue)"]?.active == status.grantsAccess, "\(status)")
            }
            #expect(all["grace-no-date"]?.active == true)
            #expect(all["renewal-late"]?.active == true)
            try await client.query("UPDATE entitlement_settings SET expiry_leeway = interval '0'", logger: Self.logger)
            #expect(try await self.rows(client)["renewal-late"]?.active == false)

            let production = try await self.rows(client, view: "entitlements_production_now")
            #expect(!production.isEmpty && production.count < all.count)
            var environments: Set<String> = []
            for try await environment in try await client.query("SELECT DISTINCT environment FROM entitlements_production_now", logger: Self.logger).decode(String.self) { environments.insert(environment) }
            #expect(environments == ["Production"])
        }
    }
}
