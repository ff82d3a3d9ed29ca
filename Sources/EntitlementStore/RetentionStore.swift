import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

/// How long each database store keeps rows (docs/privacy.md lists every store, Kafka's too). Nil: kept.
public struct RetentionPolicy: Sendable, Hashable {
    /// `ARCHIVE_RETENTION_DAYS` (default: kept; byte-exact JWSs may be needed for tax or disputes): archived
    /// notifications and pulled records by when they were stored, with their deliveries. The dedupe ledger keeps
    /// their UUIDs (no personal data), so a late duplicate stays a no-op.
    public var archiveDays: Int?
    /// `DEAD_LETTER_RECORD_RETENTION_DAYS` (28): the console's copies of dead letters (payload included) and
    /// their re-drive log, like the dead-letter topic's default.
    public var deadLetterRecordDays: Int? = 28
    /// `PURCHASE_CLAIM_RETENTION_DAYS` (90): the customer API's purchase claims once decided (pending ones stay).
    public var purchaseClaimDays: Int? = 90
    /// `CONSUMPTION_REQUEST_RETENTION_DAYS` (90): Apple's consumption requests, past their deadline.
    public var consumptionRequestDays: Int? = 90
    /// `CONSOLE_AUDIT_RETENTION_DAYS` (365): the operator console's audit log.
    public var consoleAuditDays: Int? = 365
    /// `ERASED_EVENT_IDS_RETENTION_DAYS` (30): ids of erased events the webhooks service must not deliver; longer
    /// than the events topic's retention (`TOPIC_RETENTION_DAYS`, 14) is enough.
    public var erasedEventIdsDays: Int? = 30

    public init() {}

    /// Each store, its setting and its value (for `pipelinectl retention show` and the docs test).
    public var stores: [(store: String, variable: String, days: Int?)] {
        [
            ("notification_archive", "ARCHIVE_RETENTION_DAYS", archiveDays),
            ("dead_lettered_records", "DEAD_LETTER_RECORD_RETENTION_DAYS", deadLetterRecordDays),
            ("customer_purchases", "PURCHASE_CLAIM_RETENTION_DAYS", purchaseClaimDays),
            ("consumption_requests", "CONSUMPTION_REQUEST_RETENTION_DAYS", consumptionRequestDays),
            ("console_audit", "CONSOLE_AUDIT_RETENTION_DAYS", consoleAuditDays),
            ("erased_events", "ERASED_EVENT_IDS_RETENTION_DAYS", erasedEventIdsDays),
        ]
    }
}

/// Deletes what is past its retention, in small batches (each its own short transaction: no long lock, no
/// long-running transaction holding back vacuum), oldest first.
public struct RetentionStore: Sendable {
    public let client: PostgresClient
    let logger: Logger
    /// Rows per delete statement.
    public var batchSize = 1_000

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// One run: every store with a limit, until nothing is left past it. `now` is injectable for tests. Returns the
    /// rows deleted per store (`notification_deliveries` with the archive, `dead_letter_redrives` with dead letters).
    public func prune(_ policy: RetentionPolicy, now: Date = Date(), dryRun: Bool = false) async throws -> [String: Int] {
        var deleted: [String: Int] = [:]
        func cutoff(_ days: Int) -> Date { now.addingTimeInterval(-Double(days) * 86_400) }
        if let days = policy.archiveDays {
            let before = cutoff(days)
            if dryRun {
                deleted["notification_archive"] = try await count("SELECT count(*) FROM notification_archive WHERE stored_at < \(before)")
            } else {
                try await repeatUntilDone { [batchSize] in
                    let rows = try await client.query(
                        """
                        WITH gone AS (
                            DELETE FROM notification_archive WHERE notification_uuid = ANY(ARRAY(
                                SELECT notification_uuid FROM notification_archive WHERE stored_at < \(before) ORDER BY stored_at LIMIT \(batchSize)))
                            RETURNING notification_uuid
                        ), deliveries AS (
                            DELETE FROM notification_deliveries WHERE notification_uuid IN (SELECT notification_uuid FROM gone) RETURNING 1
                        )
                        SELECT (SELECT count(*) FROM gone)::bigint, (SELECT count(*) FROM deliveries)::bigint
                        """,
                        logger: logger)
                    var archived = 0
                    for try await (gone, deliveries) in rows.decode((Int64, Int64).self) {
                        archived = Int(gone)
                        deleted["notification_archive", default: 0] += Int(gone)
                        deleted["notification_deliveries", default: 0] += Int(deliveries)
                    }
                    return archived
                }
            }
        }
        if let days = policy.deadLetterRecordDays {
            let before = cutoff(days)
            deleted["dead_lettered_records"] = try await deleteBatches(
                dryRun: dryRun, count: "SELECT count(*) FROM dead_lettered_records WHERE dead_lettered_at < \(before)",
                delete: """
                    DELETE FROM dead_lettered_records WHERE ctid = ANY(ARRAY(
                        SELECT ctid FROM dead_lettered_records WHERE dead_lettered_at < \(before) ORDER BY dead_lettered_at LIMIT \(batchSize)))
                    """)
            deleted["dead_letter_redrives"] = try await deleteBatches(
                dryRun: dryRun, count: "SELECT count(*) FROM dead_letter_redrives WHERE redriven_at < \(before)",
                delete: """
                    DELETE FROM dead_letter_redrives WHERE ctid = ANY(ARRAY(
                        SELECT ctid FROM dead_letter_redrives WHERE redriven_at < \(before) LIMIT \(batchSize)))
                    """)
        }
        if let days = policy.purchaseClaimDays {
            let before = cutoff(days)
            deleted["customer_purchases"] = try await deleteBatches(
                dryRun: dryRun, count: "SELECT count(*) FROM customer_purchases WHERE requested_at < \(before) AND status <> 'pending'",
                delete: """
                    DELETE FROM customer_purchases WHERE ctid = ANY(ARRAY(
                        SELECT ctid FROM customer_purchases WHERE requested_at < \(before) AND status <> 'pending' ORDER BY requested_at LIMIT \(batchSize)))
                    """)
        }
        if let days = policy.consumptionRequestDays {
            let before = cutoff(days)
            deleted["consumption_requests"] = try await deleteBatches(
                dryRun: dryRun, count: "SELECT count(*) FROM consumption_requests WHERE deadline < \(before)",
                delete: """
                    DELETE FROM consumption_requests WHERE ctid = ANY(ARRAY(
                        SELECT ctid FROM consumption_requests WHERE deadline < \(before) LIMIT \(batchSize)))
                    """)
        }
        if let days = policy.consoleAuditDays {
            let before = cutoff(days)
            deleted["console_audit"] = try await deleteBatches(
                dryRun: dryRun, count: "SELECT count(*) FROM console_audit WHERE at < \(before)",
                delete: "DELETE FROM console_audit WHERE ctid = ANY(ARRAY(SELECT ctid FROM console_audit WHERE at < \(before) ORDER BY at LIMIT \(batchSize)))")
        }
        if let days = policy.erasedEventIdsDays {
            let before = cutoff(days)
            deleted["erased_events"] = try await deleteBatches(
                dryRun: dryRun, count: "SELECT count(*) FROM erased_events WHERE erased_at < \(before)",
                delete: "DELETE FROM erased_events WHERE ctid = ANY(ARRAY(SELECT ctid FROM erased_events WHERE erased_at < \(before) LIMIT \(batchSize)))")
        }
        return deleted
    }

    func count(_ query: PostgresQuery) async throws -> Int {
        var total = 0
        for try await value in try await client.query(query, logger: logger).decode(Int64.self) { total = Int(value) }
        return total
    }

    func deleteBatches(dryRun: Bool, count countQuery: PostgresQuery, delete: PostgresQuery) async throws -> Int {
        if dryRun { return try await count(countQuery) }
        var total = 0
        try await repeatUntilDone { [client, logger] in
            var deleted = 0
            for try await _ in try await client.query(PostgresQuery(unsafeSQL: delete.sql + " RETURNING 1", binds: delete.binds), logger: logger).decode(Int.self) {
                deleted += 1
            }
            total += deleted
            return deleted
        }
        return total
    }

    /// Runs `batch` until it deletes fewer rows than a batch holds.
    func repeatUntilDone(_ batch: () async throws -> Int) async throws {
        while try await batch() >= batchSize, !Task.isCancelled {}
    }
}
