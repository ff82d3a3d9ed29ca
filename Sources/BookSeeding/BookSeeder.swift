@_spi(BookSeeding) import AppStoreNotifications
import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import TestSigning

/// Writes a synthetic book (`NotificationMinter.bookLifecycle`) through the worker's own store path
/// (`EntitlementStore.store`: the ledger claim, archive, deliveries, transactions, grace, the one state machine,
/// the outbox), so every row is what the workers write for those notifications. Nothing is signed or verified:
/// each JWS carries the test chain's header and its payload with a constant signature, and is taken as verified
/// through the `BookSeeding` SPI. A seeded book is for measuring; its archive does not verify.
///
/// Test material: the seed tool (`Benchmarks/Sources/seed-book`) and the test that holds the rows to those of the
/// same lifecycles signed and verified use it; no service links it.
public struct BookSeeder: Sendable {
    public let store: EntitlementStore
    public let minter: NotificationMinter
    /// The Kafka topic the seeded deliveries name (their partition is the writer, their offset the writer's count).
    public var topic = "seed"

    public init(store: EntitlementStore, minter: NotificationMinter) {
        self.store = store
        self.minter = minter
    }

    /// A constant, invalid ES256 signature (64 zero bytes, base64url).
    static let constantSignature = String(repeating: "A", count: 86)

    /// A compact JWS of `payload` under the test chain's header, the bytes `NotificationMinter` would sign.
    public func unsignedJWS(_ payload: JSONObject) -> String {
        Base64.encode(Array(minter.chain.header.serialized.utf8), alphabet: .url) + "."
            + Base64.encode(Array(payload.serialized.utf8), alphabet: .url) + "." + Self.constantSignature
    }

    /// `event` as the worker would hand it to the store, had it arrived at `offset` of partition `partition`.
    public func storedNotification(_ event: NotificationMinter.SubscriptionEvent, partition: Int32, offset: Int64) throws -> StoredNotification {
        let transaction = minter.transaction(event)
        let renewal = event.productType == "Auto-Renewable Subscription" && event.includesRenewalInfo ? minter.renewalInfo(event) : nil
        let outer = minter.payload(event, nestedJWS: unsignedJWS)
        let decoder = JSONValueDecoder()
        let signedDate = Timestamp(millisecondsSince1970: event.signedDate)
        let verified = VerifiedNotification(
            unverified: try decoder.decode(ResponseBodyV2DecodedPayload.self, from: .object(outer)), json: outer, bundleId: minter.bundleId,
            environment: minter.environment,
            transactionInfo: VerifiedPayload(
                unverifiedModel: try decoder.decode(JWSTransactionDecodedPayload.self, from: .object(transaction)), json: transaction, signedDate: signedDate),
            renewalInfo: try renewal.map {
                VerifiedPayload(unverifiedModel: try decoder.decode(JWSRenewalInfoDecodedPayload.self, from: .object($0)), json: $0, signedDate: signedDate)
            })
        return StoredNotification(
            verified: verified, signedPayload: unsignedJWS(outer), kafkaTopic: topic, kafkaPartition: partition, kafkaOffset: offset,
            receivedAt: signedDate, source: "seed")
    }

    public struct Progress: Sendable {
        public var subscriptions = 0
        public var notifications = 0
    }

    /// Seeds subscriptions `first..<first + count` with `writers` concurrent writers, each its own run of
    /// subscriptions, in chunks of `chunk` subscriptions whose events are stored in signedDate order, `batch`
    /// notifications per transaction. Returns the notifications stored.
    public func seed(
        subscriptions count: Int, first: Int = 0, templates: Int? = nil, writers: Int = 2, chunk: Int = 2_000, batch: Int = 500,
        start: Int64 = 1_735_732_800_000, spreadDays: Int = 730, progress: @escaping @Sendable (Progress) -> Void = { _ in }
    ) async throws -> Int {
        let perWriter = (count + writers - 1) / writers
        return try await withThrowingTaskGroup(of: Int.self) { group in
            for writer in 0..<writers {
                let from = first + writer * perWriter
                let until = min(first + count, from + perWriter)
                guard from < until else { continue }
                group.addTask {
                    var stored = 0
                    var offset: Int64 = 0
                    for chunkStart in stride(from: from, to: until, by: chunk) {
                        let chunkCount = min(chunk, until - chunkStart)
                        let events = NotificationMinter.bookEvents(
                            subscriptions: chunkCount, first: chunkStart, templates: templates, start: start, spreadDays: spreadDays)
                        var pending: [StoredNotification] = []
                        pending.reserveCapacity(batch)
                        for event in events {
                            pending.append(try storedNotification(event, partition: Int32(writer), offset: offset))
                            offset += 1
                            if pending.count == batch {
                                _ = try await store.store(pending)
                                stored += pending.count
                                pending.removeAll(keepingCapacity: true)
                            }
                        }
                        if !pending.isEmpty {
                            _ = try await store.store(pending)
                            stored += pending.count
                        }
                        progress(Progress(subscriptions: chunkCount, notifications: events.count))
                    }
                    return stored
                }
            }
            var total = 0
            for try await stored in group { total += stored }
            return total
        }
    }
}

// MARK: - Copies in SQL

extension BookSeeder {
    /// The tables the store writes for a book's lifecycles, in the order they are copied (each with its routing
    /// column from `DistributionLayout`, whose first 12 characters are the subscription's token).
    static let copiedTables = [
        "notification_ledger", "notification_archive", "notification_deliveries", "transactions", "transaction_grace", "entitlements",
        "entitlement_events_outbox",
    ]

    /// The id `EntitlementEvent.eventId` makes, in SQL: SHA-256 of the parts each followed by a zero byte, the first 16
    /// bytes with the version 5 layout, as a UUID.
    static let eventIdFunction = """
        CREATE OR REPLACE FUNCTION seed_book_event_id(cause text, environment text, bundle text, subject text, type text) RETURNS text
        IMMUTABLE LANGUAGE sql AS $$
            SELECT regexp_replace(encode(set_byte(set_byte(d, 6, (get_byte(d, 6) & 15) | 80), 8, (get_byte(d, 8) & 63) | 128), 'hex'),
                '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\\1-\\2-\\3-\\4-\\5')
            FROM (SELECT substring(sha256(convert_to('entitlement-event/v1', 'UTF8') || '\\x00'::bytea || convert_to(cause, 'UTF8') || '\\x00'::bytea
                || convert_to(environment, 'UTF8') || '\\x00'::bytea || convert_to(bundle, 'UTF8') || '\\x00'::bytea
                || convert_to(subject, 'UTF8') || '\\x00'::bytea || convert_to(type, 'UTF8') || '\\x00'::bytea) FROM 1 FOR 16) AS d) x
        $$
        """

    /// Copies the `templates` subscriptions stored first (indexes `0..<templates`) until the book holds
    /// `subscriptions`: copy `n` of template `i` is subscription `i + n * templates`, every text and JSON column with
    /// the template's token replaced by the copy's, event ids made again for the new subject and cause. Each table is
    /// copied by `writers` connections at once, `generationsPerStatement` copies of every template per statement.
    /// `eventsSince` (milliseconds since 1970): the outbox keeps only the events from then on, each marked published
    /// at its time, as the relay and `EVENTS_OUTBOX_RETENTION` leave a book at rest (nil: every event, unpublished).
    /// `progress` gets each table's name and the rows it now holds.
    public func copyTemplates(
        templates: Int, subscriptions: Int, writers: Int = 2, generationsPerStatement: Int = 10, eventsSince: Int64? = nil,
        progress: @escaping @Sendable (String, Int64) -> Void = { _, _ in }
    ) async throws {
        let generations = (subscriptions + templates - 1) / templates
        guard generations > 1 else { return }
        let client = store.client
        let logger = store.logger
        try await client.query(PostgresQuery(unsafeSQL: Self.eventIdFunction), logger: logger)
        let templateToken = NotificationMinter.bookToken(templates)
        if let eventsSince {
            try await client.query("DELETE FROM entitlement_events_outbox WHERE event_time < to_timestamp(\(Double(eventsSince) / 1000))", logger: logger)
            try await client.query("UPDATE entitlement_events_outbox SET published_at = event_time WHERE published_at IS NULL", logger: logger)
        }
        for table in Self.copiedTables {
            guard let routing = DistributionLayout.distributed[table] else { continue }
            let staging = "seed_book_template_\(table)"
            try await client.query(PostgresQuery(unsafeSQL: "DROP TABLE IF EXISTS \(staging)"), logger: logger)
            try await client.query(
                PostgresQuery(unsafeSQL: "CREATE UNLOGGED TABLE \(staging) AS SELECT * FROM \(table) WHERE \(routing) < '\(templateToken)'"), logger: logger)
            if table == "entitlement_events_outbox" {
                // Whether the template's id had its type among the parts (`EntitlementEvent.change` leaves it out), once.
                try await client.query(PostgresQuery(unsafeSQL: "ALTER TABLE \(staging) ADD COLUMN seed_type_part text"), logger: logger)
                try await client.query(
                    PostgresQuery(unsafeSQL: """
                        UPDATE \(staging) SET seed_type_part = CASE WHEN seed_book_event_id(data::jsonb->'cause'->>'notificationUUID', environment, bundle_id,
                            subject, '') = event_id THEN '' ELSE event_type END
                        """), logger: logger)
            }
            let select = try await selectList(table, staging: staging)
            // Generations 1..<generations, split into statements, the statements shared by the writers.
            let chunks = stride(from: 1, to: generations, by: generationsPerStatement).map { ($0, min(generations, $0 + generationsPerStatement)) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<max(1, writers) {
                    group.addTask {
                        for (index, chunk) in chunks.enumerated() where index % max(1, writers) == writer {
                            try await client.query(
                                PostgresQuery(unsafeSQL: """
                                    INSERT INTO \(table) (\(select.columns))
                                    SELECT \(select.values)
                                    FROM \(staging) s
                                    CROSS JOIN generate_series(\(chunk.0), \(chunk.1 - 1)) AS n
                                    CROSS JOIN LATERAL (SELECT substr(s.\(routing), 1, 12) AS t0,
                                        'b0' || lpad((substr(s.\(routing), 3, 10)::bigint + n::bigint * \(templates))::text, 10, '0') AS t1) x
                                    WHERE substr(s.\(routing), 3, 10)::bigint + n::bigint * \(templates) < \(subscriptions)
                                    """),
                                logger: logger)
                        }
                    }
                }
                try await group.waitForAll()
            }
            try await client.query(PostgresQuery(unsafeSQL: "DROP TABLE \(staging)"), logger: logger)
            var rows: Int64 = 0
            for try await count in try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(table)"), logger: logger).decode(Int64.self) {
                rows = count
            }
            progress(table, rows)
        }
        try await client.query("DROP FUNCTION seed_book_event_id(text, text, text, text, text)", logger: logger)
    }

    /// The column list of `table` and, for a copy, each column's value: texts, JSON and their arrays with the token
    /// replaced; the outbox's `id` left to its sequence and its `event_id` made again.
    func selectList(_ table: String, staging: String) async throws -> (columns: String, values: String) {
        var columns: [String] = []
        var values: [String] = []
        let rows = try await store.client.query(
            """
            SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
            WHERE attrelid = \(table)::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum
            """, logger: store.logger)
        for try await (name, type) in rows.decode((String, String).self) {
            switch (table, name) {
            case ("entitlement_events_outbox", "id"):
                continue
            case ("entitlement_events_outbox", "event_id"):
                let cause = "(s.data::jsonb->'cause'->>'notificationUUID')"
                values.append("seed_book_event_id(replace(\(cause), x.t0, x.t1), s.environment, s.bundle_id, replace(s.subject, x.t0, x.t1), s.seed_type_part)")
            default:
                switch type {
                case "text", "json", "jsonb", "text[]", "json[]":
                    values.append("replace(s.\(name)::text, x.t0, x.t1)::\(type)")
                default:
                    values.append("s.\(name)")
                }
            }
            columns.append(name)
        }
        return (columns.joined(separator: ", "), values.joined(separator: ", "))
    }
}
