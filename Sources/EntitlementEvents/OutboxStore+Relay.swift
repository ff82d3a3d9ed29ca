import AppStoreNotifications
import EntitlementStore
import Foundation
import Logging
import PostgresNIO

extension OutboxStore {
    /// One relay round, if this process holds the relay election: the oldest unpublished events (at most
    /// `limit`, in row order), handed to `publish`, which returns the row ids it published; those are marked
    /// published in the same transaction. Returns nil when another relay holds the election (a transaction-scoped
    /// advisory lock: a relay that dies releases it with its connection), else how many were published and
    /// whether the page was full.
    public func relayOutbox(limit: Int, _ publish: @Sendable ([OutboxEvent]) async throws -> [Int64]) async throws -> (published: Int, full: Bool)? {
        try await client.withTransaction(logger: logger) { connection in
            try await StatementTimeouts.apply(statementTimeout, on: connection, logger: logger)
            var elected = false
            for try await value in try await connection.query("SELECT pg_try_advisory_xact_lock(\(Self.relayLockKey))", logger: logger).decode(Bool.self) {
                elected = value
            }
            guard elected else { return nil }
            let rows = try await connection.query(
                """
                SELECT id, event_id, event_type, source, subject, (extract(epoch FROM event_time) * 1000)::bigint, sequence, data, traceparent
                FROM entitlement_events_outbox WHERE published_at IS NULL ORDER BY id LIMIT \(limit)
                """,
                logger: logger)
            var events: [OutboxEvent] = []
            for try await (id, eventId, type, source, subject, time, sequence, data, traceparent) in rows.decode(
                (Int64, String, String, String, String, Int64, Int64?, String, String?).self)
            {
                var event = OutboxEvent(
                    rowId: id, eventId: eventId, type: type, source: source, subject: subject,
                    time: Timestamp(millisecondsSince1970: time).rfc3339Milliseconds, sequence: sequence, data: data)
                event.traceparent = traceparent
                events.append(event)
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

