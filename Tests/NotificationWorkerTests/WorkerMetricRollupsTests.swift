import Foundation
import PipelineTestSupport
import PostgresNIO
import TestGates
import TestSupport
import Testing

/// The worker process applies the subscriptions its batches change to the metrics' daily rollups every
/// `METRIC_ROLLUPS_INTERVAL`, one worker of the group at a time, and says so on `/metrics`.
@Suite("Worker: the metrics' rollups applied by the process", .serialized, .requiresKafkaAndPostgres)
struct WorkerMetricRollupsTests: ProcessSuite {
    @Test("two workers store a stream; the changed set drains without a metric read; the rollups answer as the full computation does")
    func aggregatorRound() async throws {
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 2)
        let events = NotificationMinter.lifecycleEvents(subscriptions: 40)
        try await fixture.produce(events.map(fixture.minter.signedNotification))
        let database = try await TestDatabase.create("rollups" + UUID().uuidString.prefix(6).lowercased(), on: postgresURL)
        let group = TestServices.uniqueName("rollups")
        let extra = ["METRIC_ROLLUPS_INTERVAL": "1s"]
        let first = try await fixture.startWorker(group: group, postgresURL: database, extra: extra)
        let second = try await fixture.startWorker(group: group, postgresURL: database, extra: extra)
        #expect(try await TestDatabase.waitForLedger(database, count: Set(events.map(\.notificationUUID)).count, timeout: .seconds(60)), "\(fixture.logTail())")

        // Nothing reads a metric here: only the workers' rounds can empty the changed set.
        var pending: Int64 = -1
        var periods: Int64 = 0
        for _ in 0..<100 {
            (pending, periods) = try await TestDatabase.with(database) { client in
                var counts: (Int64, Int64) = (-1, 0)
                let rows = try await client.query(
                    "SELECT (SELECT count(*) FROM metric_dirty_subscriptions), (SELECT count(*) FROM metric_periods)", logger: ingestTestLogger)
                for try await row in rows.decode((Int64, Int64).self) { counts = row }
                return counts
            }
            if pending == 0 && periods > 0 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(pending == 0 && periods > 0, "\(pending) changed subscriptions waiting, \(periods) periods\n\(fixture.logTail())")

        // The two sources agree on what the stream stored (a whole year by month around its dates).
        let differing = try await TestDatabase.with(database) { client in
            var count = 0
            let rows = try await client.query(
                """
                SELECT count(*)::int FROM (
                    (SELECT * FROM metric_active_subscriptions('2025-01-01', '2027-01-01', 'month', 'Production')
                     EXCEPT SELECT * FROM metric_rollup_active_subscriptions('2025-01-01', '2027-01-01', 'month', 'Production'))
                    UNION ALL
                    (SELECT * FROM metric_rollup_new_subscriptions('2025-01-01', '2027-01-01', 'month', 'Production')
                     EXCEPT SELECT * FROM metric_new_subscriptions('2025-01-01', '2027-01-01', 'month', 'Production'))
                ) d
                """, logger: ingestTestLogger)
            for try await value in rows.decode(Int.self) { count = value }
            return count
        }
        #expect(differing == 0)
        let started = try await TestDatabase.with(database) { client in
            var count: Int64 = 0
            let rows = try await client.query(
                "SELECT coalesce(sum(new_paid + new_trials), 0)::bigint FROM metric_rollup_new_subscriptions('2025-01-01', '2027-01-01', 'month', 'Production')",
                logger: ingestTestLogger)
            for try await value in rows.decode(Int64.self) { count = value }
            return count
        }
        #expect(started > 0, "the compared figures are not all zero")

        // One of the two ran the rounds that applied them, and exports what it applied and what is left.
        var applied = 0.0
        var pendingGauges: [Double] = []
        for worker in [first, second] {
            let text = try await HTTPTestConnection(port: worker.opsPort).send(method: "GET", path: "/metrics").bodyText
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let parts = line.split(separator: " ")
                guard parts.count == 2, let value = Double(parts[1]) else { continue }
                if parts[0] == "worker_metric_rollups_applied_total" { applied += value }
                if parts[0] == "worker_metric_rollups_pending" { pendingGauges.append(value) }
            }
        }
        #expect(applied >= Double(Set(events.map(\.originalTransactionId)).count), "applied \(applied)")
        #expect(pendingGauges.count == 2 && pendingGauges.allSatisfy { $0 == 0 }, "\(pendingGauges)")
        await fixture.stopOneByOne([first.process, second.process])
    }
}
