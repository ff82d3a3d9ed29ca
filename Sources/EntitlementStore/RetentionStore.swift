import Foundation
import Logging
import PostgresNIO

/// How long each database store keeps rows (docs/privacy.md lists every store, Kafka's too). Nil: kept.
public struct RetentionPolicy: Sendable, Hashable {
    /// `ARCHIVE_RETENTION_DAYS` (default: kept; byte-exact JWSs may be needed for tax or disputes): archived
    /// notifications and pulled records by when Apple signed them (the month partitions' key), with their
    /// deliveries. The dedupe ledger keeps
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
    /// `WEBHOOK_DELIVERY_RETENTION` (30d, a duration): finished webhook deliveries with their attempts. The
    /// `webhooks` service prunes them too; this job covers them so one run prunes every store.
    public var webhookDeliveries: Duration? = .seconds(30 * 86_400)
    /// `EVENTS_OUTBOX_RETENTION` (7d, a duration): entitlement events already published to the events topic (the
    /// relay prunes them too; unpublished events are never pruned).
    public var publishedEvents: Duration? = .seconds(7 * 86_400)
    /// `OFFER_SIGNATURE_RETENTION_DAYS` (180): offer signatures never redeemed, by when they were issued (a signature
    /// StoreKit did not use within days will not be; redeemed ones stay with the purchase, docs/offers.md).
    public var offerSignatureDays: Int? = 180

    public init() {}

    /// Each store, its setting and its limit (for `pipelinectl retention show` and the docs test).
    public var stores: [(store: String, variable: String, limit: Duration?)] {
        let days = Self.limit(days:)
        return [
            ("notification_archive", "ARCHIVE_RETENTION_DAYS", days(archiveDays)),
            ("dead_lettered_records", "DEAD_LETTER_RECORD_RETENTION_DAYS", days(deadLetterRecordDays)),
            ("customer_purchases", "PURCHASE_CLAIM_RETENTION_DAYS", days(purchaseClaimDays)),
            ("consumption_requests", "CONSUMPTION_REQUEST_RETENTION_DAYS", days(consumptionRequestDays)),
            ("console_audit", "CONSOLE_AUDIT_RETENTION_DAYS", days(consoleAuditDays)),
            ("erased_events", "ERASED_EVENT_IDS_RETENTION_DAYS", days(erasedEventIdsDays)),
            ("webhook_deliveries", "WEBHOOK_DELIVERY_RETENTION", webhookDeliveries),
            ("entitlement_events_outbox", "EVENTS_OUTBOX_RETENTION", publishedEvents),
            ("offer_signatures", "OFFER_SIGNATURE_RETENTION_DAYS", days(offerSignatureDays)),
        ]
    }

    /// A number of days as a limit.
    static func limit(days: Int?) -> Duration? { days.map { .seconds(Int64($0) * 86_400) } }

    /// A limit as people write it: `30 days`, `36 hours`, `90 minutes`, or `kept`.
    public static func describe(_ limit: Duration?) -> String {
        guard let seconds = limit?.components.seconds else { return "kept" }
        if seconds % 86_400 == 0 { return "\(seconds / 86_400) days" }
        if seconds % 3_600 == 0 { return "\(seconds / 3_600) hours" }
        return "\(seconds / 60) minutes"
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
        func cutoff(_ limit: Duration) -> Date { now.addingTimeInterval(-Double(limit.components.seconds)) }
        if let limit = RetentionPolicy.limit(days: policy.archiveDays) {
            try await pruneArchive(before: cutoff(limit), dryRun: dryRun, into: &deleted)
        }
        // The other stores: rows older than their column's cutoff (and `filter`), oldest first where the column is
        // indexed (`ordered`); the dead-letter re-drive log goes with the dead letters; of the outbox, only events
        // the relay has published.
        let days = RetentionPolicy.limit(days:)
        let tables: [(table: String, column: String, filter: String, ordered: Bool, limit: Duration?)] = [
            ("dead_lettered_records", "dead_lettered_at", "", true, days(policy.deadLetterRecordDays)),
            ("dead_letter_redrives", "redriven_at", "", false, days(policy.deadLetterRecordDays)),
            ("dead_letter_claims", "claimed_at", "", true, days(policy.deadLetterRecordDays)),
            ("customer_purchases", "requested_at", " AND status <> 'pending'", true, days(policy.purchaseClaimDays)),
            ("consumption_requests", "deadline", "", false, days(policy.consumptionRequestDays)),
            ("console_audit", "at", "", true, days(policy.consoleAuditDays)),
            ("erased_events", "erased_at", "", false, days(policy.erasedEventIdsDays)),
            ("entitlement_events_outbox", "published_at", " AND published_at IS NOT NULL", true, policy.publishedEvents),
            ("offer_signatures", "issued_at", " AND redeemed_transaction_id IS NULL", false, days(policy.offerSignatureDays)),
        ]
        // The outbox's days (migration 28) whose every event was published before the cutoff go whole first.
        if let limit = policy.publishedEvents, !dryRun {
            deleted["entitlement_events_outbox"] = try await dropFinishedPartitions(
                of: "entitlement_events_outbox", before: cutoff(limit),
                unfinished: "published_at IS NULL OR published_at >= $1")
        }
        for entry in tables {
            guard let limit = entry.limit else { continue }
            deleted[entry.table, default: 0] += try await pruneRows(
                of: entry.table, olderThan: cutoff(limit), by: entry.column, filter: entry.filter, ordered: entry.ordered, dryRun: dryRun)
        }
        // Finished webhook deliveries, whose attempts go with them (ON DELETE CASCADE; counted before they go).
        if let limit = policy.webhookDeliveries {
            let before = cutoff(limit)
            if !dryRun {
                // Months of attempts and deliveries (by the event's time) whose every delivery finished before the cutoff.
                let months = try await finishedPartitions(of: "webhook_deliveries", before: before, unfinished: "status = 'pending' OR finished_at >= $1")
                let maintenance = PartitionMaintenance(client: client, logger: logger)
                let attemptMonths = months.isEmpty ? [] : try await maintenance.partitions(of: "webhook_attempts")
                for month in months {
                    for attempts in attemptMonths where attempts.lowerBound == month.lowerBound {
                        deleted["webhook_attempts", default: 0] += try await maintenance.rowCount(of: attempts)
                        try await maintenance.drop(attempts)
                    }
                    deleted["webhook_deliveries", default: 0] += try await maintenance.rowCount(of: month)
                    try await maintenance.drop(month)
                }
            }
            if dryRun {
                deleted["webhook_deliveries"] = try await count(
                    "SELECT count(*) FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < \(before)")
                deleted["webhook_attempts"] = try await count(
                    """
                    SELECT count(*) FROM webhook_attempts WHERE delivery_id IN (
                        SELECT id FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < \(before))
                    """)
            } else {
                try await deleteInBatches(counting: ("webhook_deliveries", "webhook_attempts"), into: &deleted) { [batchSize] in
                    """
                    WITH old AS (
                        SELECT id FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < \(before) ORDER BY finished_at LIMIT \(batchSize)
                    ), gone AS (
                        DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM old) RETURNING id, subject, event_time
                    ), attempts AS (
                        DELETE FROM webhook_attempts a USING gone WHERE a.delivery_id = gone.id AND a.subject = gone.subject AND a.event_time = gone.event_time
                        RETURNING 1
                    )
                    SELECT (SELECT count(*) FROM gone)::bigint, (SELECT count(*) FROM attempts)::bigint
                    """
                }
            }
        }
        return deleted
    }

    /// The archive and its deliveries signed before `before`: whole months are dropped (`PartitionMaintenance.drop`:
    /// no row-by-row delete, no dead tuples, no lock on the writers above its `lock_timeout`), then the rest of the
    /// month the cutoff falls in goes in batches. The ledger's months are kept (a late duplicate stays a no-op).
    func pruneArchive(before: Date, dryRun: Bool, into deleted: inout [String: Int]) async throws {
        if dryRun {
            deleted["notification_archive"] = try await count("SELECT count(*) FROM notification_archive WHERE signed_date < \(before)")
            deleted["notification_deliveries"] = try await count("SELECT count(*) FROM notification_deliveries WHERE signed_date < \(before)")
            return
        }
        let maintenance = PartitionMaintenance(client: client, logger: logger)
        for table in ["notification_deliveries", "notification_archive"] {
            for partition in try await maintenance.partitions(of: table, endingBy: before) {
                deleted[table, default: 0] += try await maintenance.rowCount(of: partition)
                try await maintenance.drop(partition)
            }
        }
        try await deleteInBatches(counting: ("notification_archive", "notification_deliveries"), into: &deleted) { [batchSize] in
            """
            WITH gone AS (
                DELETE FROM notification_archive WHERE signed_date < \(before) AND (notification_uuid, routing_key, signed_date) IN (
                    SELECT notification_uuid, routing_key, signed_date FROM notification_archive WHERE signed_date < \(before)
                    ORDER BY signed_date LIMIT \(batchSize))
                RETURNING notification_uuid, signed_date
            ), deliveries AS (
                DELETE FROM notification_deliveries d USING gone
                WHERE d.signed_date < \(before) AND d.notification_uuid = gone.notification_uuid AND d.signed_date = gone.signed_date RETURNING 1
            )
            SELECT (SELECT count(*) FROM gone)::bigint, (SELECT count(*) FROM deliveries)::bigint
            """
        }
    }

    /// The partitions of `parent` that end by `before` and hold no row matching `unfinished` (SQL of this file;
    /// `$1` is the cutoff): what retention may drop whole.
    func finishedPartitions(of parent: String, before: Date, unfinished: String) async throws -> [PartitionMaintenance.Partition] {
        var finished: [PartitionMaintenance.Partition] = []
        for partition in try await PartitionMaintenance(client: client, logger: logger).partitions(of: parent, endingBy: before) {
            var binds = PostgresBindings()
            binds.append(before)
            let open = try await count(PostgresQuery(
                unsafeSQL: "SELECT count(*) FROM (SELECT 1 FROM \(PartitionMaintenance.quoted(partition.name)) WHERE \(unfinished) LIMIT 1) x", binds: binds))
            if open == 0 { finished.append(partition) }
        }
        return finished
    }

    /// Drops the partitions `finishedPartitions` finds; answers the rows they held.
    func dropFinishedPartitions(of parent: String, before: Date, unfinished: String) async throws -> Int {
        let maintenance = PartitionMaintenance(client: client, logger: logger)
        var rows = 0
        for partition in try await finishedPartitions(of: parent, before: before, unfinished: unfinished) {
            rows += try await maintenance.rowCount(of: partition)
            try await maintenance.drop(partition)
        }
        return rows
    }

    func count(_ query: PostgresQuery) async throws -> Int {
        var total = 0
        for try await value in try await client.query(query, logger: logger).decode(Int64.self) { total = Int(value) }
        return total
    }

    /// Deletes (or, `dryRun`, counts) the rows of `table` whose `column` is before `before` and that match `filter`
    /// (SQL of this file, never data), `batchSize` per statement. The table and column names are constants of `prune`.
    func pruneRows(of table: String, olderThan before: Date, by column: String, filter: String, ordered: Bool, dryRun: Bool) async throws -> Int {
        let condition = "\(column) < $1\(filter)"
        func bound(_ sql: String, _ values: Int...) -> PostgresQuery {
            var binds = PostgresBindings()
            binds.append(before)
            for value in values { binds.append(value) }
            return PostgresQuery(unsafeSQL: sql, binds: binds)
        }
        if dryRun { return try await count(bound("SELECT count(*) FROM \(table) WHERE \(condition)")) }
        // A row's ctid is its place in one heap: the partitions of a partitioned table each have their own, so the
        // same ctid names a row in each. The delete goes leaf by leaf (a table that is not partitioned is its own
        // one leaf: `pg_partition_tree` lists none for it), never through the parent, where it would take every partition's row at those places.
        var leaves: [String] = []
        for try await leaf in try await client.query(
            "SELECT relid::regclass::text FROM pg_partition_tree(\(table)::regclass) WHERE isleaf ORDER BY level, relid", logger: logger
        ).decode(String.self) {
            leaves.append(leaf)
        }
        if leaves.isEmpty { leaves = [table] }  // not partitioned: pg_partition_tree has no row for it
        var total = 0
        for leaf in leaves {
            let delete = bound(
                """
                DELETE FROM \(leaf) WHERE ctid = ANY(ARRAY(SELECT ctid FROM \(leaf) WHERE \(condition)\(ordered ? " ORDER BY \(column)" : "") LIMIT $2))
                RETURNING 1
                """, batchSize)
            try await repeatUntilDone { [client, logger] in
                var deleted = 0
                for try await _ in try await client.query(delete, logger: logger).decode(Int.self) { deleted += 1 }
                total += deleted
                return deleted
            }
        }
        return total
    }

    /// Runs `batch` until it deletes fewer rows than a batch holds.
    /// Runs the batch delete `query` makes (it answers the rows it deleted of a table and of the table that goes with
    /// it) until a batch is short, adding both counts to `deleted` under `tables`.
    func deleteInBatches(counting tables: (String, String), into deleted: inout [String: Int], _ query: () -> PostgresQuery) async throws {
        try await repeatUntilDone {
            var first = 0
            for try await (main, companion) in try await client.query(query(), logger: logger).decode((Int64, Int64).self) {
                first = Int(main)
                deleted[tables.0, default: 0] += Int(main)
                deleted[tables.1, default: 0] += Int(companion)
            }
            return first
        }
    }

    func repeatUntilDone(_ batch: () async throws -> Int) async throws {
        while try await batch() >= batchSize, !Task.isCancelled {}
    }
}
