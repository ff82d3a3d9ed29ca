@testable import EntitlementStore
import Foundation
import Logging
import PipelineOperations
import PostgresNIO
import StoreTestSupport
import TestGates
import TestSupport
import Testing

/// The outbox's day partitions and the webhook tables' month partitions (migration 28, docs/scale.md): the rows of
/// version 27 carried over both ways (inside the migration, and copied online beside a writer with the migration
/// only swapping), and retention dropping whole partitions only when nothing in them is still owed.
@Suite("Time partitions of the outbox and the webhook tables against a real PostgreSQL", .serialized, .requiresPostgres)
struct EventPartitionTests {
    static let logger = quietLogger("event-partition-tests")

    /// The columns version 27 had, per table: what must come through the move unchanged.
    static let columns: [String: String] = [
        "entitlement_events_outbox":
            "id, event_id, event_type, source, subject, event_time, sequence, environment, bundle_id, original_transaction_id, data, created_at, published_at, traceparent",
        "webhook_deliveries":
            "id, endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status, attempts, next_attempt_at, leased_until, last_status, last_error, last_latency_ms, response_excerpt, created_at, finished_at, lease_token, traceparent",
        "webhook_attempts": "id, delivery_id, attempted_at, status, latency_ms, error, response_excerpt, trace_id, subject",
    ]

    /// Every row of the three tables (version 27's columns), one JSON text per row, by id.
    static func contents(_ client: PostgresClient) async throws -> [String: [String]] {
        var result: [String: [String]] = [:]
        for (table, columns) in columns {
            result[table] = try await strings("SELECT row_to_json(t)::text FROM (SELECT \(columns) FROM \(table)) t ORDER BY id", client)
        }
        return result
    }

    static func strings(_ sql: String, _ client: PostgresClient) async throws -> [String] {
        var result: [String] = []
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(String.self) { result.append(value) }
        return result
    }

    static func count(_ sql: String, _ client: PostgresClient) async throws -> Int {
        var result = 0
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(Int64.self) { result = Int(value) }
        return result
    }

    static func run(_ sql: String, _ client: PostgresClient) async throws {
        try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger)
    }

    /// A database at version 27 with `rows` events (a third unpublished, created over the last `rows` hours, so
    /// across many days), a delivery of each to one endpoint (event times over the last year) and an attempt of each.
    static func version27(_ purpose: String, rows: Int) async throws -> String {
        let url = try await FreshDatabase.create(FreshDatabase.uniqueName(purpose), on: try RequiredServices.postgresURL, logger: logger)
        try await FreshDatabase.withClient(url, logger: logger) { client in
            #expect(try await EntitlementStore(client: client, logger: logger).migrate(through: 27) == Array(1...27))
            try await run("INSERT INTO webhook_endpoints (id, url, bundle_ids, event_types, allow_http, secret) VALUES ('ep', 'http://127.0.0.1:9/', '{}', '{}', true, 's')", client)
            try await run(
                """
                INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, sequence, environment, bundle_id,
                    original_transaction_id, data, created_at, published_at, traceparent)
                SELECT 'event-' || g, 'subscription.renewed', 'test', 'otid-' || (g % 97), now() - g * interval '1 hour', g, 'Sandbox', 'app',
                    'otid-' || (g % 97), '{"n":' || g || '}', now() - g * interval '1 hour',
                    CASE WHEN g % 3 = 0 THEN NULL ELSE now() - g * interval '1 hour' + interval '1 second' END, NULL
                FROM generate_series(1, \(rows)) g
                """, client)
            try await run(
                """
                INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status,
                    attempts, finished_at)
                SELECT 'ep', 'event-' || g, 'subscription.renewed', 'otid-' || (g % 97), now() - (g % 365) * interval '1 day', g % 4, g, '{}',
                    CASE WHEN g % 5 = 0 THEN 'pending' ELSE 'delivered' END, 1, CASE WHEN g % 5 = 0 THEN NULL ELSE now() END
                FROM generate_series(1, \(rows)) g
                """, client)
            try await run(
                "INSERT INTO webhook_attempts (delivery_id, subject, status, latency_ms) SELECT id, subject, 200, id % 50 FROM webhook_deliveries", client)
        }
        return url
    }

    @Test("migration 28 alone: every row of version 27 carries over, the outbox by day (its earlier days in one partition), the webhook tables by month of the event")
    func migratedInTransaction() async throws {
        let url = try await Self.version27("event-partitions-migrated", rows: 1_500)
        try await FreshDatabase.withClient(url, logger: Self.logger) { client in
            let before = try await Self.contents(client)
            #expect(before["webhook_attempts"]?.count == 1_500)
            #expect(try await EntitlementStore(client: client, logger: Self.logger).migrate() == [28])
            #expect(try await Self.contents(client) == before)
            let keys = try await Self.strings(
                """
                SELECT c.relname || ' ' || pg_get_partkeydef(c.oid) FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
                WHERE c.relname IN ('entitlement_events_outbox', 'webhook_deliveries', 'webhook_attempts') ORDER BY 1
                """, client)
            #expect(keys == ["entitlement_events_outbox RANGE (created_at)", "webhook_attempts RANGE (event_time)", "webhook_deliveries RANGE (event_time)"])
            let outboxPartitions = try await PartitionMaintenance(client: client, logger: Self.logger).partitions(of: "entitlement_events_outbox")
            #expect(outboxPartitions.count == 4, "\(outboxPartitions.map(\.name))")
            #expect(outboxPartitions.first?.name.hasPrefix("entitlement_events_outbox_until_") == true)
            // An attempt is in its delivery's month.
            #expect(try await Self.count(
                """
                SELECT count(*) FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id AND d.subject = a.subject
                WHERE a.event_time = d.event_time AND a.tableoid::regclass::text = 'webhook_attempts_' || to_char(d.event_time AT TIME ZONE 'UTC', 'YYYY_MM')
                """, client) == 1_500)
            #expect(try await Self.count("SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND (relname LIKE '%\\_partitioned%' OR relname LIKE 'online\\_repartition%')", client) == 0)
        }
    }

    @Test("migrate online: copied in batches beside a writer that inserts, updates and deletes; the migration then only swaps, and every row is as the writer left it")
    func onlineCopyThenSwap() async throws {
        let url = try await Self.version27("event-partitions-online", rows: 2_000)
        try await FreshDatabase.withClient(url, logger: Self.logger) { client in
            var repartition = OnlineRepartition(client: client, logger: Self.logger)
            repartition.batchSize = 150
            try await repartition.prepare()
            try await repartition.prepare()  // idempotent

            // Written after the triggers, before the copy reaches the rows: mirrored at once.
            try await Self.run("UPDATE entitlement_events_outbox SET published_at = now() WHERE id BETWEEN 30 AND 60 AND published_at IS NULL", client)
            try await Self.run("DELETE FROM entitlement_events_outbox WHERE id BETWEEN 1 AND 10", client)
            try await Self.run("DELETE FROM webhook_deliveries WHERE id BETWEEN 1 AND 10", client)  // their attempts by the old foreign key
            // What a copy batch does when it read a row just before a writer deleted it: the row lands in the twin
            // after the delete. The tombstone the delete left takes it out at the swap.
            let deleted = try await Self.strings("DELETE FROM entitlement_events_outbox WHERE id = 1999 RETURNING row_to_json(entitlement_events_outbox)::text", client)
            #expect(deleted.count == 1)
            try await client.query(
                "INSERT INTO entitlement_events_outbox_partitioned SELECT * FROM json_populate_record(NULL::entitlement_events_outbox_partitioned, \(deleted.first ?? "{}")::json)",
                logger: Self.logger)
            #expect(try await Self.count("SELECT count(*) FROM entitlement_events_outbox_partitioned WHERE id = 1999", client) == 1)

            // A writer of version 27's statements, all through the copy.
            let writing = Task {
                var round = 0
                while !Task.isCancelled {
                    round += 1
                    try await Self.run(
                        """
                        INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, environment, bundle_id, original_transaction_id, data)
                        VALUES ('live-\(round)', 'subscription.renewed', 'test', 'otid-\(round % 7)', now(), 'Sandbox', 'app', 'otid-\(round % 7)', '{}')
                        ON CONFLICT (event_id, subject) DO NOTHING
                        """, client)
                    try await Self.run("UPDATE entitlement_events_outbox SET published_at = now() WHERE id = (SELECT min(id) FROM entitlement_events_outbox WHERE published_at IS NULL)", client)
                    try await Self.run(
                        """
                        WITH d AS (
                            INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body)
                            VALUES ('ep', 'live-\(round)', 'subscription.renewed', 'otid-\(round % 7)', now() - interval '400 days', 0, \(100_000 + round), '{}')
                            ON CONFLICT (endpoint_id, event_id, subject) DO NOTHING RETURNING id, subject
                        )
                        INSERT INTO webhook_attempts (delivery_id, subject, status, latency_ms) SELECT id, subject, 500, 3 FROM d
                        """, client)
                    try await Self.run("UPDATE webhook_deliveries SET status = 'delivered', finished_at = now() WHERE id = (SELECT min(id) FROM webhook_deliveries WHERE status = 'pending')", client)
                    try await Self.run("DELETE FROM webhook_deliveries WHERE id = (SELECT min(id) FROM webhook_deliveries WHERE id > 10 AND status = 'delivered')", client)
                    try await Task.sleep(for: .milliseconds(2))
                }
            }
            let copies = try await repartition.copy()
            writing.cancel()
            _ = await writing.result
            #expect(copies.map(\.table) == ["webhook_attempts", "webhook_deliveries", "entitlement_events_outbox"])
            #expect(copies.allSatisfy { $0.batches > 5 }, "\(copies)")
            let before = try await Self.contents(client)
            #expect(try await Self.count("SELECT count(*) FROM entitlement_events_outbox WHERE event_id LIKE 'live-%'", client) > 0)
            #expect(try await Self.count("SELECT count(*) FROM webhook_deliveries WHERE event_time < now() - interval '399 days'", client) > 0)

            #expect(try await EntitlementStore(client: client, logger: Self.logger).migrate() == [28])
            #expect(try await Self.contents(client) == before)
            #expect(try await Self.count("SELECT count(*) FROM entitlement_events_outbox WHERE id = 1999", client) == 0)
            await #expect(throws: OnlineRepartition.Refusal.self) { try await repartition.prepare() }
        }
    }

    @Test("retention drops an outbox day only when every event in it was published before the cutoff, and a month of deliveries with its attempts only when every delivery finished before it")
    func retentionDropsFinishedPartitions() async throws {
        try await withMigratedStore("event-partitions-retention", logger: Self.logger) { _, client in
            let now = Date()
            let maintenance = PartitionMaintenance(client: client, logger: Self.logger)
            try await maintenance.createComing(now: now)
            // Today's outbox: published events and one the relay has not published yet.
            try await Self.run(
                """
                INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, environment, bundle_id, data, published_at)
                SELECT 'e' || g, 't', 's', 'otid-' || g, now(), 'Sandbox', 'app', '{}', CASE WHEN g = 1 THEN NULL ELSE now() END FROM generate_series(1, 50) g
                """, client)
            try await Self.run("INSERT INTO webhook_endpoints (id, url, bundle_ids, event_types, allow_http, secret) VALUES ('ep', 'http://127.0.0.1:9/', '{}', '{}', true, 's')", client)
            // Deliveries of events of March and April 2025 (a backfill's): all of March delivered, one of April pending.
            for (month, pending) in [("2025-03", false), ("2025-04", true)] {
                try await TimePartitions().ensure(
                    tables: TimePartitions.webhookTables, period: .month, instants: [TestDates.milliseconds("\(month)-10T00:00:00Z")], client: client, logger: Self.logger)
                try await Self.run(
                    """
                    WITH d AS (
                        INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status, finished_at)
                        SELECT 'ep', '\(month)-' || g, 't', 'otid-' || g, '\(month)-10T00:00:00Z'::timestamptz + g * interval '1 hour', 0, g, '{}',
                            CASE WHEN \(pending) AND g = 1 THEN 'pending' ELSE 'delivered' END, CASE WHEN \(pending) AND g = 1 THEN NULL ELSE now() END
                        FROM generate_series(1, 40) g RETURNING id, subject, event_time
                    )
                    INSERT INTO webhook_attempts (delivery_id, subject, event_time, status, latency_ms) SELECT id, subject, event_time, 200, 1 FROM d
                    """, client)
            }
            var policy = RetentionPolicy()
            policy.publishedEvents = .seconds(7 * 86_400)
            policy.webhookDeliveries = .seconds(30 * 86_400)
            // Nine days on: today's outbox day ended before the cutoff, but one of its events is still unpublished.
            let later = now.addingTimeInterval(40 * 86_400)
            let deleted = try await RetentionStore(client: client, logger: Self.logger).prune(policy, now: later)
            #expect(deleted["entitlement_events_outbox"] == 49, "\(deleted)")
            #expect(try await Self.strings("SELECT event_id FROM entitlement_events_outbox", client) == ["e1"])
            let today = "entitlement_events_outbox_" + Self.dayName(now)
            #expect(try await maintenance.partitions(of: "entitlement_events_outbox").map(\.name).contains(today))
            // March went whole with its attempts; April stays (a pending delivery), its finished deliveries and their attempts deleted.
            let months = try await maintenance.partitions(of: "webhook_deliveries").map(\.name)
            #expect(!months.contains("webhook_deliveries_2025_03") && months.contains("webhook_deliveries_2025_04"), "\(months)")
            #expect(try await !maintenance.partitions(of: "webhook_attempts").map(\.name).contains("webhook_attempts_2025_03"))
            #expect(deleted["webhook_deliveries"] == 79 && deleted["webhook_attempts"] == 79, "\(deleted)")
            #expect(try await Self.count("SELECT count(*) FROM webhook_deliveries", client) == 1)
            #expect(try await Self.count("SELECT count(*) FROM webhook_attempts", client) == 1)

            // The relay publishes the last one: the day goes whole on the next run.
            try await Self.run("UPDATE entitlement_events_outbox SET published_at = now()", client)
            let again = try await RetentionStore(client: client, logger: Self.logger).prune(policy, now: later)
            #expect(again["entitlement_events_outbox"] == 1, "\(again)")
            #expect(try await !maintenance.partitions(of: "entitlement_events_outbox").map(\.name).contains(today))
        }
    }

    static func dayName(_ date: Date) -> String {
        let parts = TimePartitions.utcCalendar.dateComponents([.year, .month, .day], from: date)
        return String(format: "%04d_%02d_%02d", parts.year!, parts.month!, parts.day!)
    }
}
