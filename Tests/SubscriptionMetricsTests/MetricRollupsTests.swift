import EntitlementStore
import Foundation
import PostgresNIO
import SubscriptionMetrics
import TestSupport
import Testing

/// The daily rollups (migration 27) against the full computation (migration 14), on the hand-computed book.
extension SubscriptionMetricsTests {
    /// The queries every comparison runs: the four months by month, week and day, one app, and Sandbox.
    static var comparedQueries: [MetricQuery] {
        var queries: [MetricQuery] = []
        for bucket in [MetricBucket.month, .week, .day, .quarter] {
            var query = fourMonths
            query.bucket = bucket
            queries.append(query)
        }
        var oneApp = fourMonths
        oneApp.bundleId = "com.example.pipeline.app"
        queries.append(oneApp)
        var sandbox = fourMonths
        sandbox.environment = "Sandbox"
        queries.append(sandbox)
        var euros = fourMonths
        (euros.currency, euros.from, euros.to) = ("EUR", TestDates.date("2025-12-01T00:00:00Z"), TestDates.date("2027-03-01T00:00:00Z"))
        queries.append(euros)
        return queries
    }

    /// Every difference `compareRollups` finds over `comparedQueries`.
    func differences(_ store: EntitlementStore) async throws -> [String] {
        var found: [String] = []
        for query in Self.comparedQueries {
            found += try await store.metrics.compareRollups(query).map { "\(query.bucket) \(query.environment) \(query.currency): \($0)" }
        }
        return found
    }

    /// The rollup tables' rows that do not sum to zero, as text, sorted.
    func rollupRows(_ client: PostgresClient) async throws -> [String] {
        var rows: [String] = []
        let tables = [
            ("metric_rollup_active", "delta <> 0"), ("metric_rollup_mrr", "amount <> 0 OR periods <> 0 OR unpriced <> 0"), ("metric_rollup_starts", "count <> 0"),
            ("metric_rollup_refunds", "paid <> 0 OR refunded <> 0 OR refunded_amount <> 0 OR refunded_unpriced <> 0"),
            ("metric_rollup_retention", "subscriptions <> 0"), ("metric_rollup_mrr_movement", "amount <> 0 OR periods <> 0 OR unpriced <> 0"),
            ("metric_rollup_churn_corners", "weight <> 0"), ("metric_rollup_churn_edges", "weight <> 0"), ("metric_rollup_product_durations", "periods <> 0"),
            ("metric_rollup_refund_requests", "count <> 0"),
        ]
        for (table, nonZero) in tables {
            let query = PostgresQuery(unsafeSQL: "SELECT '\(table) ' || row_to_json(t)::text FROM \(table) t WHERE \(nonZero)")
            for try await row in try await client.query(query, logger: Self.logger).decode(String.self) { rows.append(row) }
        }
        return rows.sorted()
    }

    @Test("the rollups answer every metric as the full computation does, and the compare finds a corrupted rollup")
    func rollupsAgreeWithFullComputation() async throws {
        let records = try await records(Self.book())
        try await withStore { store, client in
            _ = try await store.store(records)
            let status = try await store.metrics.rollupStatus()
            #expect(status.built)
            #expect(try await differences(store) == [])
            #expect(try await store.metrics.rollupStatus().pending == 0)
            let periods = try await store.metrics.rollupStatus().periods
            #expect(periods > 30, "\(periods) periods")

            // Read explicitly from each source: the same tables.
            for metric in SubscriptionMetric.allCases {
                let rollups = try await store.metrics.metric(metric, Self.fourMonths, source: .rollups)
                let full = try await store.metrics.metric(metric, Self.fourMonths, source: .full)
                #expect(rollups == full, "\(metric.rawValue)")
                #expect(!rollups.rows.isEmpty)
            }
            // A filter the rollups do not keep is refused when they are asked, and answered in full otherwise.
            var filtered = Self.fourMonths
            filtered.storefront = "DEU"
            await #expect(throws: MetricRollupsUnavailable.self) { try await store.metrics.metric(.mrr, filtered, source: .rollups) }
            var midday = Self.fourMonths
            midday.from = TestDates.date("2026-01-01T12:00:00Z")
            #expect(midday.rollupRefusal != nil)
            #expect(Self.fourMonths.rollupRefusal == nil)

            // A manual duration and a new expiry leeway reach the rollups through the subscriptions they mark.
            try await store.metrics.setProductDuration(productId: "com.example.pipeline.basic.monthly", duration: "P3M")
            #expect(try await store.metrics.rollupStatus().pending > 0)
            try await client.query("UPDATE entitlement_settings SET expiry_leeway = interval '10 days'", logger: Self.logger)
            #expect(try await differences(store) == [])

            // The compare can fail: one corrupted count, in a month the four months cover.
            try await client.query(
                "UPDATE metric_rollup_active SET delta = delta + 1 WHERE (environment, bundle_id, day, kind) IN (SELECT environment, bundle_id, day, kind FROM metric_rollup_active WHERE environment = 'Production' AND kind = 'paid' AND day < '2026-03-01' ORDER BY day LIMIT 1)",
                logger: Self.logger)
            let found = try await store.metrics.compareRollups(Self.fourMonths)
            #expect(found.contains { $0.metric == "active-subscriptions" })
            #expect(found.contains { $0.metric == "mrr" } == false)
        }
    }

    @Test("rollups kept batch by batch, shuffled and replayed, equal a rebuild from scratch")
    func incrementalEqualsRebuild() async throws {
        let records = try await records(Self.book())
        var generator = SplitMix64(seed: 3)
        let shuffled = records.shuffled(using: &generator)
        try await withStore { store, client in
            var index = 0
            while index < shuffled.count {
                let size = Int(generator.next() % 5) + 1
                _ = try await store.store(Array(shuffled[index..<min(index + size, shuffled.count)]))
                // Applied between batches, as the workers' maintenance round and the metric reads do.
                if generator.next() % 2 == 0 { _ = try await store.metrics.applyRollups(catalog: true) }
                index += size
            }
            _ = try await store.store(shuffled)
            #expect(try await differences(store) == [])
            let incremental = try await rollupRows(client)
            #expect(incremental.count > 50)
            let rebuilt = try await store.metrics.rebuildRollups()
            #expect(rebuilt > 30, "\(rebuilt) periods")
            #expect(try await rollupRows(client) == incremental)
            #expect(try await differences(store) == [])
        }
    }

    @Test("a change still uncommitted while the rollups are applied is applied after it commits, not lost")
    func uncommittedChangeIsNotLost() async throws {
        let records = try await records(Self.book())
        try await withStore { store, client in
            _ = try await store.store(records)
            #expect(try await differences(store) == [])
            // S1 changed and committed, not applied yet: its row waits in the changed set.
            let s1 = "4100000001"
            try await client.query("UPDATE transactions SET expires_date = expires_date + interval '1 day' WHERE original_transaction_id = \(s1) AND transaction_id = '4200000102'",
                                   logger: Self.logger)
            #expect(try await store.metrics.rollupStatus().pending == 1)
            // A worker's transaction changes S1 again and is still open while the aggregator runs: the trigger's
            // upsert holds S1's row, so the aggregator skips it instead of reading S1 without the change.
            try await client.withTransaction(logger: Self.logger) { connection in
                try await connection.query(
                    "UPDATE transactions SET revocation_date = purchase_date + interval '3 days', revocation_reason = 0 WHERE original_transaction_id = \(s1) AND transaction_id = '4200000103'",
                    logger: Self.logger)
                #expect(try await store.metrics.applyRollups() == 0)
            }
            #expect(try await store.metrics.rollupStatus().pending == 1)
            #expect(try await differences(store) == [])
            #expect(try await store.metrics.rollupStatus().pending == 0)
        }
    }
}
