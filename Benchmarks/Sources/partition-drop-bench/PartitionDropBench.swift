import AppStoreNotifications
import BenchSupport
import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import TestSupport

/// Retention's drop of the oldest month on a seeded book while Apple's notifications keep coming: ingest and a
/// worker run on the book, notifications are posted to ingest at RATE a second, and the oldest partition of
/// `notification_deliveries` and of `notification_archive` is dropped as retention drops it
/// (`PartitionMaintenance.drop`: `DETACH PARTITION … CONCURRENTLY`, then `DROP TABLE`, each with a 200 ms
/// `lock_timeout`). Prints each drop's time and size, and for the seconds before, during and after the drops the
/// POSTs' latency and the longest lock wait any backend had (`pg_locks.waitstart`, sampled every 10 ms).
///
/// Usage: BENCH_DATABASE=<book> partition-drop-bench BOOTSTRAP POSTGRES_URL [RATE=200] [MONTHS=1] (issue 56: the drop
/// under a second, no lock wait above 200 ms). The book loses its oldest MONTHS months of archive and deliveries,
/// dropped one after the other, oldest first.
@main
struct PartitionDropBench {
    static func main() async throws {
        guard let book = ProcessInfo.processInfo.environment["BENCH_DATABASE"], !book.isEmpty else {
            print("partition-drop-bench needs BENCH_DATABASE: a book seeded by seed-book (docs/scale.md); it drops that book's oldest month")
            exit(2)
        }
        let (stack, arguments) = try await BenchStack.start(name: "partition-drop", usage: "partition-drop-bench BOOTSTRAP POSTGRES_URL [RATE=200] [MONTHS=1]")
        defer { stack.stop() }
        let rate = arguments.int(3, default: 200)
        let months = arguments.int(4, default: 1)
        let logger = stack.logger
        let ingestPort = TestServices.freePort()
        let ingestOps = TestServices.freePort()
        _ = try await stack.start("ingest", ["INGEST_HOST": "127.0.0.1", "INGEST_PORT": String(ingestPort), "INGEST_OPS_PORT": String(ingestOps)], opsPort: ingestOps)

        let postgres = PostgresClient(configuration: try .init(url: stack.databaseURL), backgroundLogger: logger)
        let postgresRunning = Task { await postgres.run() }
        defer { postgresRunning.cancel() }

        // The stream: this run's own subscriptions (new ids), signed by the stack's PKI so the worker applies them.
        let start = Int64(Date().timeIntervalSince1970 * 1000) - 40 * 86_400_000
        let events = NotificationMinter.lifecycleEvents(subscriptions: rate * (40 + 2 * months) / 3 + 1, firstSubscription: 70_000_000 + Int.random(in: 0..<1_000_000) * 100, start: start)
        let bodies = events.map { Array("{\"signedPayload\":\"\(stack.minter.signedNotification($0))\"}".utf8) }
        print("partition-drop-bench: \(book), \(rate) notifications/s posted to ingest (\(bodies.count) minted), one worker")

        let clock = ContinuousClock()
        let origin = clock.now
        func at() -> Double { BenchFigures.milliseconds(clock.now - origin) / 1000 }
        let posts = Samples<(at: Double, latency: Double, ok: Bool)>()
        let waits = Samples<(at: Double, longest: Double, waiting: Int)>()

        let poster = Task {
            var next = 0
            while !Task.isCancelled && next < bodies.count {
                let tick = clock.now
                let batch = Array(bodies[next..<min(bodies.count, next + max(1, rate / 10))])
                next += batch.count
                let sent = at()
                let outcomes = await HTTPLoad.run(port: ingestPort, count: batch.count, concurrency: 4) {
                    ("/v2/notifications", ["Content-Type": "application/json"], batch[$0])
                }
                for outcome in outcomes { posts.append((sent, outcome.latency, outcome.status == 200)) }
                try? await Task.sleep(until: tick + .milliseconds(100), clock: clock)
            }
        }
        let sampler = Task {
            while !Task.isCancelled {
                let tick = clock.now
                let rows = try? await postgres.query(
                    """
                    SELECT coalesce(extract(epoch FROM max(now() - waitstart)), 0)::float8, count(*)::int
                    FROM pg_locks WHERE NOT granted AND waitstart IS NOT NULL
                    """, logger: logger)
                if let rows {
                    for try await (longest, waiting) in rows.decode((Double, Int).self) { waits.append((at(), longest, waiting)) }
                }
                try? await Task.sleep(until: tick + .milliseconds(10), clock: clock)
            }
        }

        try await Task.sleep(for: .seconds(15))
        let dropStart = at()
        let maintenance = PartitionMaintenance(client: postgres, logger: logger)
        var dropLines: [String] = []
        for (_, table) in (0..<months).flatMap({ month in ["notification_deliveries", "notification_archive"].map { (month, $0) } }) {
            guard let oldest = try await maintenance.partitions(of: table).first else { continue }
            var size = (bytes: Int64(0), rows: Int64(0))
            for try await row in try await postgres.query(
                "SELECT pg_total_relation_size(\(oldest.name)::regclass)::int8, reltuples::int8 FROM pg_class WHERE relname = \(oldest.name)", logger: logger
            ).decode((Int64, Int64).self) { size = row }
            let began = at()
            try await maintenance.drop(oldest)
            dropLines.append(String(format: "dropped %@ (%@ … %@): %.0f MB, ≈ %lld rows, in %.3f s", oldest.name,
                "\(oldest.lowerBound)", "\(oldest.upperBound)", Double(size.bytes) / 1e6, size.rows, at() - began))
        }
        let dropEnd = at()
        try await Task.sleep(for: .seconds(10))
        poster.cancel()
        sampler.cancel()
        _ = await poster.result
        _ = await sampler.result

        for line in dropLines { print(line) }
        print(String(format: "all drops: %.3f s", dropEnd - dropStart))
        print("phase        POSTs   not 200   p50 ms   p99 ms   max ms   longest lock wait ms   samples with a waiter")
        let phases: [(String, ClosedRange<Double>)] = [("before", 0...dropStart), ("during", dropStart...dropEnd), ("after", dropEnd...Double.infinity)]
        for (name, range) in phases {
            let latencies = posts.values.filter { range.contains($0.at) }.map(\.latency)
            let failed = posts.values.filter { range.contains($0.at) && !$0.ok }.count
            let sampled = waits.values.filter { range.contains($0.at) }
            print(name.padding(toLength: 13, withPad: " ", startingAt: 0)
                + String(format: "%5d %9d %8.1f %8.1f %8.1f %22.1f %23d", latencies.count, failed, BenchFigures.percentile(latencies, 0.5) * 1000,
                    BenchFigures.percentile(latencies, 0.99) * 1000, (latencies.max() ?? 0) * 1000, (sampled.map(\.longest).max() ?? 0) * 1000,
                    sampled.filter { $0.waiting > 0 }.count))
        }
        print("(the lock waits are every backend's of the cluster: the worker's inserts, the drop's own DETACH and DROP, anything else running)")
    }
}

/// Values appended from several tasks.
final class Samples<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [Value] = []
    func append(_ value: Value) { lock.withLock { stored.append(value) } }
    var values: [Value] { lock.withLock { stored } }
}
