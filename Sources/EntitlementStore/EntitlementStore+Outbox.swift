import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

/// An outbox row on its way to the events topic.
public struct OutboxEvent: Sendable, Hashable {
    /// The outbox row's id: within one subscription, the order its events were written in.
    public var rowId: Int64
    public var eventId: String
    public var type: String
    public var source: String
    public var subject: String
    /// `ce_time`, RFC 3339 with milliseconds.
    public var time: String
    public var sequence: Int64?
    /// The JSON `data`, exactly as written in the batch transaction.
    public var data: String

    public init(rowId: Int64, eventId: String, type: String, source: String, subject: String, time: String, sequence: Int64?, data: String) {
        self.rowId = rowId
        self.eventId = eventId
        self.type = type
        self.source = source
        self.subject = subject
        self.time = time
        self.sequence = sequence
        self.data = data
    }
}

extension EntitlementStore {
    /// The advisory lock that elects the one relay publishing at a time ("evts" in ASCII).
    static let relayLockKey: Int64 = 0x6576_7473

    /// An event's scalar columns as a JSON object; its `data` (a JSON document) travels beside it as text, so
    /// PostgreSQL parses it once rather than unescaping it out of the rows' JSON first.
    static func outboxRow(_ event: EntitlementEvent) -> JSONValue {
        .object(JSONObject([
            "event_id": .string(event.id),
            "event_type": .string(event.type.rawValue),
            "source": .string(event.source),
            "subject": .string(event.subject),
            "event_time": millis(event.time),
            "sequence": event.sequence.map { .number(JSONNumber($0)) } ?? .null,
            "environment": .string(event.environment),
            "bundle_id": .string(event.bundleId),
            "original_transaction_id": text(event.originalTransactionId),
        ]))
    }

    /// Inserted in the order given (the order the changes took effect), so within a subscription the row ids
    /// follow the sequence; an event id already there (it cannot be, as the ledger admits a cause once) is kept.
    static func outboxStatement(_ events: [EntitlementEvent]) -> PostgresQuery {
        """
        INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, sequence, environment, bundle_id,
            original_transaction_id, data)
        SELECT r.event_id, r.event_type, r.source, r.subject, to_timestamp(r.event_time / 1000.0), r.sequence, r.environment, r.bundle_id,
            r.original_transaction_id, r.data
        FROM ROWS FROM (jsonb_to_recordset(\(JSONValue.array(events.map(outboxRow)).serialized)::jsonb) AS (event_id text, event_type text,
            source text, subject text, event_time bigint, sequence bigint, environment text, bundle_id text, original_transaction_id text),
            unnest(\(events.map(\.data.serialized))::text[])) WITH ORDINALITY
            AS r(event_id, event_type, source, subject, event_time, sequence, environment, bundle_id, original_transaction_id, data, position)
        ORDER BY r.position
        ON CONFLICT (event_id) DO NOTHING
        """
    }

    /// One relay round, if this process holds the relay election: the oldest unpublished events (at most
    /// `limit`, in row order), handed to `publish`, which returns the row ids it published; those are marked
    /// published in the same transaction. Returns nil when another relay holds the election (a transaction-scoped
    /// advisory lock: a relay that dies releases it with its connection), else how many were published and
    /// whether the page was full.
    public func relayOutbox(limit: Int, _ publish: @Sendable ([OutboxEvent]) async throws -> [Int64]) async throws -> (published: Int, full: Bool)? {
        try await client.withTransaction(logger: logger) { connection in
            try await applyTimeouts(on: connection)
            var elected = false
            for try await value in try await connection.query("SELECT pg_try_advisory_xact_lock(\(Self.relayLockKey))", logger: logger).decode(Bool.self) {
                elected = value
            }
            guard elected else { return nil }
            let rows = try await connection.query(
                """
                SELECT id, event_id, event_type, source, subject, (extract(epoch FROM event_time) * 1000)::bigint, sequence, data
                FROM entitlement_events_outbox WHERE published_at IS NULL ORDER BY id LIMIT \(limit)
                """,
                logger: logger)
            var events: [OutboxEvent] = []
            for try await (id, eventId, type, source, subject, time, sequence, data) in rows.decode((Int64, String, String, String, String, Int64, Int64?, String).self) {
                events.append(OutboxEvent(
                    rowId: id, eventId: eventId, type: type, source: source, subject: subject,
                    time: Timestamp(millisecondsSince1970: time).rfc3339Milliseconds, sequence: sequence, data: data))
            }
            guard !events.isEmpty else { return (0, false) }
            let published = try await publish(events)
            if !published.isEmpty {
                try await connection.query(
                    "UPDATE entitlement_events_outbox SET published_at = now() WHERE id = ANY(\(published)::bigint[])", logger: logger)
            }
            return (published.count, events.count == limit)
        }
    }

    /// Age in seconds of the oldest event not yet published (0 when none waits).
    public func oldestUnpublishedEventAge() async throws -> Double {
        let rows = try await client.query(
            """
            SELECT coalesce((SELECT extract(epoch FROM now() - created_at)::float8 FROM entitlement_events_outbox
                WHERE published_at IS NULL ORDER BY id LIMIT 1), 0)
            """,
            logger: logger)
        for try await age in rows.decode(Double.self) { return age }
        return 0
    }

    /// Deletes published events older than `retention`, at most `limit` rows per call (bounded work and locks).
    @discardableResult
    public func prunePublishedEvents(olderThan retention: Duration, limit: Int = 10_000) async throws -> Int {
        let seconds = Double(retention.components.seconds) + Double(retention.components.attoseconds) / 1e18
        let rows = try await client.query(
            """
            WITH old AS (SELECT id FROM entitlement_events_outbox WHERE published_at IS NOT NULL
                AND published_at < now() - make_interval(secs => \(seconds)) ORDER BY published_at LIMIT \(limit))
            DELETE FROM entitlement_events_outbox o USING old WHERE o.id = old.id RETURNING o.id
            """,
            logger: logger)
        var count = 0
        for try await _ in rows.decode(Int64.self) { count += 1 }
        return count
    }
}

extension EntitlementStore.EntitlementKey {
    /// The second key of the subscription's advisory lock: FNV-1a of the key, stable in every process.
    var advisoryLockId: Int32 {
        var hash: UInt32 = 2_166_136_261
        for part in [environment, bundleId, originalTransactionId] {
            for byte in part.utf8 {
                hash = (hash ^ UInt32(byte)) &* 16_777_619
            }
            hash = (hash ^ 0x1F) &* 16_777_619
        }
        return Int32(bitPattern: hash)
    }
}
