import Foundation
import PostgresNIO

/// What a backfill has done so far; kept with its checkpoint, reported in its summary.
public struct BackfillCounts: Sendable, Hashable {
    public var pages = 0
    /// Notifications on the pages fetched.
    public var fetched = 0
    /// Records the broker acknowledged.
    public var produced = 0
    /// Fetched notifications whose notificationUUID the ledger already held (stored before; the workers skip them).
    public var alreadyStored = 0
    /// Fetched notifications the ledger did not hold.
    public var newNotifications = 0

    public init(pages: Int = 0, fetched: Int = 0, produced: Int = 0, alreadyStored: Int = 0, newNotifications: Int = 0) {
        self.pages = pages
        self.fetched = fetched
        self.produced = produced
        self.alreadyStored = alreadyStored
        self.newNotifications = newNotifications
    }
}

/// A notification-history backfill's place: the window it covers and the token of the next page to fetch.
public struct BackfillCheckpoint: Sendable, Hashable {
    public var id: Int64
    public var startDate: Int64
    public var endDate: Int64
    /// Apple's token for the next page; nil before the first page.
    public var paginationToken: String?
    public var counts: BackfillCounts
    /// True when this run continues one that stopped before its end.
    public var resumed: Bool
}

extension EntitlementStore {
    /// The unfinished run for `argumentsKey`, or a new one over `startDate…endDate`. With `restart`, an unfinished
    /// run is closed as `restarted` and a new one begins.
    public func openBackfillRun(
        argumentsKey: String, arguments: String, bundleId: String, environment: String, startDate: Int64, endDate: Int64, restart: Bool
    ) async throws -> BackfillCheckpoint {
        if restart {
            try await client.query(
                "UPDATE backfill_runs SET completed_at = now(), outcome = 'restarted' WHERE arguments_key = \(argumentsKey) AND completed_at IS NULL",
                logger: logger)
        }
        let existing = try await client.query(
            """
            SELECT id, (extract(epoch FROM start_date) * 1000)::bigint, (extract(epoch FROM end_date) * 1000)::bigint, pagination_token,
                pages, fetched, produced, already_stored, new_notifications
            FROM backfill_runs WHERE arguments_key = \(argumentsKey) AND completed_at IS NULL
            """,
            logger: logger)
        for try await (id, start, end, token, pages, fetched, produced, already, new) in existing.decode((Int64, Int64, Int64, String?, Int, Int, Int, Int, Int).self) {
            let counts = BackfillCounts(pages: pages, fetched: fetched, produced: produced, alreadyStored: already, newNotifications: new)
            return BackfillCheckpoint(id: id, startDate: start, endDate: end, paginationToken: token, counts: counts, resumed: true)
        }
        let inserted = try await client.query(
            """
            INSERT INTO backfill_runs (arguments_key, arguments, bundle_id, environment, start_date, end_date)
            VALUES (\(argumentsKey), \(arguments)::jsonb, \(bundleId), \(environment), to_timestamp(\(startDate) / 1000.0), to_timestamp(\(endDate) / 1000.0))
            RETURNING id
            """,
            logger: logger)
        for try await id in inserted.decode(Int64.self) {
            return BackfillCheckpoint(id: id, startDate: startDate, endDate: endDate, paginationToken: nil, counts: BackfillCounts(), resumed: false)
        }
        throw BackfillRunMissing()
    }

    /// Records a page whose records the broker acknowledged: the next page's token and the counts so far.
    public func saveBackfillCheckpoint(_ checkpoint: BackfillCheckpoint) async throws {
        let counts = checkpoint.counts
        try await client.query(
            """
            UPDATE backfill_runs SET pagination_token = \(checkpoint.paginationToken), pages = \(counts.pages), fetched = \(counts.fetched),
                produced = \(counts.produced), already_stored = \(counts.alreadyStored), new_notifications = \(counts.newNotifications),
                updated_at = now(), last_error = NULL
            WHERE id = \(checkpoint.id)
            """,
            logger: logger)
    }

    /// Closes a run: `completed` at its last page, or `failed` with the reason (then it stays resumable: only
    /// `completed` and `restarted` close it).
    public func finishBackfillRun(id: Int64, outcome: String, error: String? = nil) async throws {
        if outcome == "failed" {
            try await client.query("UPDATE backfill_runs SET last_error = \(error), updated_at = now() WHERE id = \(id)", logger: logger)
        } else {
            try await client.query(
                "UPDATE backfill_runs SET completed_at = now(), outcome = \(outcome), last_error = \(error), updated_at = now() WHERE id = \(id)", logger: logger)
        }
    }

    /// Which of `uuids` the ledger holds (stored before).
    public func notificationsInLedger(_ uuids: [String]) async throws -> Set<String> {
        guard !uuids.isEmpty else { return [] }
        var found: Set<String> = []
        let rows = try await client.query(
            "SELECT notification_uuid FROM notification_ledger WHERE notification_uuid = ANY(\(uuids)::text[])", logger: logger)
        for try await uuid in rows.decode(String.self) { found.insert(uuid) }
        return found
    }

    /// When ingest received the notification `uuid` and when a worker stored it (milliseconds since 1970), if stored.
    public func storedTimes(notificationUUID uuid: String) async throws -> (receivedAt: Int64?, storedAt: Int64)? {
        let rows = try await client.query(
            """
            SELECT (extract(epoch FROM received_at) * 1000)::bigint, (extract(epoch FROM stored_at) * 1000)::bigint
            FROM notifications WHERE notification_uuid = \(uuid)
            """,
            logger: logger)
        for try await (received, stored) in rows.decode((Int64?, Int64).self) { return (received, stored) }
        return nil
    }
}

struct BackfillRunMissing: Error, CustomStringConvertible {
    var description: String { "the backfill run's row was not returned by PostgreSQL" }
}
