import BenchSupport
import PipelineOperations
import TestSupport
import EntitlementStore
import Foundation
import Logging
import PostgresNIO

/// `pipelinectl migrate online` on a book at schema version 27 (`SEED_SCHEMA_VERSION=27 seed-book …`): the outbox,
/// the webhook deliveries and their attempts, each filled up to ROWS rows first (events of the last week, published,
/// one delivery of each to one endpoint and one attempt each, as a week of a busy deployment leaves them), are
/// copied into their partitioned twins (`OnlineRepartition`) while a writer goes on as the workers, the relay and the
/// webhooks service write (an event inserted, one published, a delivery inserted and one finished, WRITE_RATE rounds
/// a second); then migration 28 swaps. Prints the copy's time and rate, the swap's time, the rows before and after,
/// and the writer's latency before, during the copy and around the swap.
///
/// Usage: online-migration-bench POSTGRES_URL [ROWS=1000000] [WRITE_RATE=100] [BATCH=10000] (issue 56: the online path
/// tested on a book of a million). The book is migrated to the current version by it.
@main
struct OnlineMigrationBench {
    static func main() async throws {
        let arguments = BenchArguments(usage: "online-migration-bench POSTGRES_URL [ROWS=1000000] [WRITE_RATE=100] [BATCH=10000]", required: 1)
        var configuration = try PostgresClient.Configuration(url: arguments[1])
        if let book = ProcessInfo.processInfo.environment["BENCH_DATABASE"], !book.isEmpty { configuration.database = book }
        configuration.options.maximumConnections = 6
        let rows = Int64(arguments.int(2, default: 1_000_000))
        let rate = arguments.int(3, default: 100)
        let batch = arguments.int(4, default: 10_000)
        var logger = Logger(label: "online-migration-bench")
        logger.logLevel = .critical
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let running = Task { await client.run() }
        defer { running.cancel() }
        func run(_ sql: String) async throws { try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger) }
        func count(_ sql: String) async throws -> Int64 {
            var value: Int64 = 0
            for try await n in try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(Int64.self) { value = n }
            return value
        }
        var repartition = OnlineRepartition(client: client, logger: logger)
        repartition.batchSize = batch
        try await repartition.checkReady()

        let clock = ContinuousClock()
        let origin = clock.now
        func at() -> Double { BenchFigures.milliseconds(clock.now - origin) / 1000 }

        // The three tables filled up to ROWS rows.
        try await run("INSERT INTO webhook_endpoints (id, url, bundle_ids, event_types, allow_http, secret) VALUES ('bench', 'http://127.0.0.1:9/', '{}', '{}', true, 'bench') ON CONFLICT DO NOTHING")
        let existing = try await count("SELECT count(*) FROM entitlement_events_outbox")
        if existing < rows {
            try await run(
                """
                INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, sequence, environment, bundle_id,
                    original_transaction_id, data, created_at, published_at)
                SELECT 'bench-' || g, 'subscription.renewed', 'bench', 'bench-' || (g % 200000), t, 1, 'Production', 'com.example.bench',
                    'bench-' || (g % 200000), '{"bench":' || g || ',"padding":"' || repeat('x', 400) || '"}', t, t + interval '2 seconds'
                FROM generate_series(1, \(rows - existing)) g, LATERAL (SELECT now() - (g % 604800) * interval '1 second' AS t) x
                """)
        }
        let deliveries = try await count("SELECT count(*) FROM webhook_deliveries")
        if deliveries < rows {
            try await run(
                """
                INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status,
                    attempts, last_status, finished_at, created_at)
                SELECT 'bench', event_id, event_type, subject, event_time, 0, id, data, 'delivered', 1, 200, published_at + interval '1 second', published_at
                FROM entitlement_events_outbox ORDER BY id LIMIT \(rows - deliveries)
                """)
        }
        if try await count("SELECT count(*) FROM webhook_attempts") == 0 {
            try await run(
                """
                INSERT INTO webhook_attempts (delivery_id, subject, attempted_at, status, latency_ms, response_excerpt)
                SELECT id, subject, finished_at, 200, 40, 'ok' FROM webhook_deliveries
                """)
        }
        try await run("VACUUM ANALYZE entitlement_events_outbox, webhook_deliveries, webhook_attempts")
        var sizes: [String] = []
        for table in ["entitlement_events_outbox", "webhook_deliveries", "webhook_attempts"] {
            let n = try await count("SELECT count(*) FROM \(table)")
            let bytes = try await count("SELECT pg_total_relation_size('\(table)')")
            sizes.append(String(format: "%@ %lld rows, %.0f MB", table, n, Double(bytes) / 1e6))
        }
        print("online-migration-bench: \(configuration.database ?? "?"), filled in \(String(format: "%.1f", at())) s: " + sizes.joined(separator: "; "))

        let outboxBefore = try await count("SELECT count(*) FROM entitlement_events_outbox")
        // The writer: what the workers, the relay and the webhooks service write, the same statements before and after the swap.
        let writes = Samples()
        let writer = Task {
            var round = 0
            while !Task.isCancelled {
                let tick = clock.now
                round += 1
                let started = at()
                do {
                    try await run(
                        """
                        INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, environment, bundle_id, original_transaction_id, data)
                        VALUES ('live-\(round)-\(Int(origin.hashValue & 0xffff))', 'subscription.renewed', 'bench', 'live-\(round % 1000)', now(), 'Production',
                            'com.example.bench', 'live-\(round % 1000)', '{}')
                        ON CONFLICT DO NOTHING
                        """)
                    try await run("UPDATE entitlement_events_outbox SET published_at = now() WHERE id = (SELECT min(id) FROM entitlement_events_outbox WHERE published_at IS NULL)")
                    try await run(
                        """
                        INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body)
                        VALUES ('bench', 'live-\(round)-\(Int(origin.hashValue & 0xffff))', 'subscription.renewed', 'live-\(round % 1000)', now(), 1, \(round), '{}')
                        ON CONFLICT DO NOTHING
                        """)
                    try await run(
                        """
                        UPDATE webhook_deliveries SET status = 'delivered', finished_at = now(), attempts = attempts + 1
                        WHERE id = (SELECT min(id) FROM webhook_deliveries WHERE status = 'pending' AND endpoint_id = 'bench')
                        """)
                    writes.append(started, at() - started, true)
                } catch {
                    // A round the end of the run cut short is not a failure of the swap.
                    if Task.isCancelled { break }
                    writes.append(started, at() - started, false)
                }
                try? await Task.sleep(until: tick + .milliseconds(1000 / max(1, rate)), clock: clock)
            }
        }
        try await Task.sleep(for: .seconds(10))
        let copyStart = at()
        try await repartition.prepare()
        let prepared = at()
        let copies = try await repartition.copy()
        let copyEnd = at()
        try await Task.sleep(for: .seconds(5))
        let swapStart = at()
        let applied = try await EntitlementStore(client: client, logger: logger).migrate()
        let swapEnd = at()
        try await Task.sleep(for: .seconds(10))
        writer.cancel()
        _ = await writer.result
        let outboxAfter = try await count("SELECT count(*) FROM entitlement_events_outbox")
        let written = writes.values.filter(\.ok).count

        print(String(format: "prepare (twins, partitions, triggers): %.2f s", prepared - copyStart))
        for copy in copies {
            print(String(format: "copied %@: %lld rows in %d batches of %d, %.1f s (%.0f rows/s)", copy.table, copy.rowsInserted, copy.batches, batch, copy.seconds,
                Double(copy.rowsInserted) / max(copy.seconds, 0.001)))
        }
        print(String(format: "swap (migration %@ with the rest of the copy): %.3f s", applied.map(String.init).joined(separator: ","), swapEnd - swapStart))
        print("outbox rows: \(outboxBefore) before the writer, \(outboxAfter) after (\(outboxAfter - outboxBefore) more); the writer's successful rounds: \(written), one event each")
        print("phase         rounds   failed   p50 ms   p99 ms   max ms")
        let phases: [(String, ClosedRange<Double>)] = [
            ("before", 0...copyStart), ("copy", copyStart...copyEnd), ("between", copyEnd...swapStart), ("swap", swapStart...swapEnd), ("after", swapEnd...Double.infinity),
        ]
        for (name, range) in phases {
            let inPhase = writes.values.filter { range.contains($0.at) || ($0.at < range.lowerBound && $0.at + $0.latency > range.lowerBound) }
            let latencies = inPhase.map(\.latency)
            print(name.padding(toLength: 13, withPad: " ", startingAt: 0)
                + String(format: "%7d %8d %8.1f %8.1f %8.1f", latencies.count, inPhase.filter { !$0.ok }.count, BenchFigures.percentile(latencies, 0.5) * 1000,
                    BenchFigures.percentile(latencies, 0.99) * 1000, (latencies.max() ?? 0) * 1000))
        }
        print("(a round: an event inserted, the oldest unpublished one published, a delivery inserted, the oldest pending one finished)")
    }
}

/// The writer's rounds: when each started, how long it took, whether it succeeded.
final class Samples: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [(at: Double, latency: Double, ok: Bool)] = []
    func append(_ at: Double, _ latency: Double, _ ok: Bool) { lock.withLock { stored.append((at, latency, ok)) } }
    var values: [(at: Double, latency: Double, ok: Bool)] { lock.withLock { stored } }
}
