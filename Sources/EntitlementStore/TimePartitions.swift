import Foundation
import Logging
import PostgresNIO
import Synchronization

/// The monthly partitions of the notification tables (`Migrations.partitions`) this process has seen exist.
///
/// A row can only be stored once its month's partition exists, and Apple's `signedDate` (the partition key) may be
/// any month: this one, or years back for a backfill or an import. So before each batch the store makes sure the
/// months it is about to write exist (`ensure_time_partition`, in a statement of its own, outside the batch's
/// transaction: the attach waits for no insert), and remembers them, so a batch of a known month costs nothing. The
/// worker's maintenance round creates the coming months ahead of time as well.
public final class TimePartitions: Sendable {
    /// The tables partitioned by month of the notification's `signedDate`.
    public static let notificationTables = ["notification_ledger", "notification_archive", "notification_deliveries"]

    /// `table` and the month's (or day's) first instant, in ms since 1970 (UTC).
    private struct Month: Hashable, Comparable {
        var table: String
        var start: Int64
        static func < (a: Month, b: Month) -> Bool { (a.table, a.start) < (b.table, b.start) }
    }

    private let known = Mutex<Set<Month>>([])

    public init() {}

    /// The first instant (ms, UTC) of the calendar month holding `milliseconds`.
    static let utcCalendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    static func monthStart(ofMilliseconds milliseconds: Int64) -> Int64 {
        periodStart(.month, ofMilliseconds: milliseconds)
    }

    /// The first instant (ms, UTC) of the calendar month or day holding `milliseconds`.
    static func periodStart(_ period: Period, ofMilliseconds milliseconds: Int64) -> Int64 {
        let calendar = utcCalendar
        let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
        let components: Set<Calendar.Component> = period == .month ? [.year, .month] : [.year, .month, .day]
        let start = calendar.date(from: calendar.dateComponents(components, from: date))!
        return Int64((start.timeIntervalSince1970 * 1000).rounded())
    }

    /// How long one partition of a table is.
    public enum Period: String, Sendable {
        case month, day
    }

    /// The outbox by day of `created_at` (migration 28).
    public static let outboxTable = "entitlement_events_outbox"
    /// The webhook deliveries and their attempts, by month of the event's time (migration 28).
    public static let webhookTables = ["webhook_deliveries", "webhook_attempts"]

    /// Makes sure each of `tables` has the partitions of the months of `instants` (ms since 1970).
    public func ensure(tables: [String] = notificationTables, monthsOf instants: [Int64], client: PostgresClient, logger: Logger) async throws {
        try await ensure(tables: tables, period: .month, instants: instants, client: client, logger: logger)
    }

    /// Makes sure each of `tables` has the partitions (of `period`) holding `instants` (ms since 1970). A period
    /// another partition already holds (the outbox's partition of the days before migration 28) is left to it.
    public func ensure(tables: [String], period: Period, instants: [Int64], client: PostgresClient, logger: Logger) async throws {
        let starts = Set(instants.map { Self.periodStart(period, ofMilliseconds: $0) })
        let wanted = tables.flatMap { table in starts.map { Month(table: table, start: $0) } }
        let missing = known.withLock { known in wanted.filter { !known.contains($0) } }.sorted()
        guard !missing.isEmpty else { return }
        try await client.withConnection { connection in
            var unpartitioned: Set<String> = []
            for table in Set(missing.map(\.table)) where !Self.notificationTables.contains(table) {
                // The outbox and the webhook tables are partitioned from migration 28 on; before it (a database
                // `pipelinectl migrate online` is preparing, or a book seeded at an earlier version) there is nothing to make.
                for try await partitioned in try await connection.query(
                    "SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(\(table))), false)", logger: logger
                ).decode(Bool.self) where !partitioned { unpartitioned.insert(table) }
            }
            for month in missing where !unpartitioned.contains(month.table) {
                // The notification tables' months as migration 21 made them; the others may have a partition of
                // several days (the outbox's days before migration 28), which `ensure_time_partition_for` leaves be.
                let function = Self.notificationTables.contains(month.table) ? "ensure_time_partition" : "ensure_time_partition_for"
                var binds = PostgresBindings()
                binds.append(month.table)
                binds.append(period.rawValue)
                binds.append(Double(month.start) / 1000)
                try await connection.query(
                    PostgresQuery(unsafeSQL: "SELECT \(function)($1::regclass, $2, to_timestamp($3))", binds: binds), logger: logger)
            }
        }
        known.withLock { known in known.formUnion(missing) }
    }

    /// PostgreSQL's "no partition of relation … found for row" (SQLSTATE 23514), also inside a transaction's error.
    public static func isMissingPartition(_ error: any Error) -> Bool {
        if let error = error as? PostgresTransactionError, let inner = error.closureError { return isMissingPartition(inner) }
        guard let error = error as? PSQLError, let info = error.serverInfo else { return false }
        return info[.sqlState] == "23514" && (info[.message] ?? "").hasPrefix("no partition")
    }

    /// Forgets what it has seen (after partitions were dropped, for example by retention), so the next batch checks again.
    public func forget() {
        known.withLock { $0.removeAll() }
    }
}
