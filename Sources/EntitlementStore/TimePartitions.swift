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

    /// `table` and the month's first instant, in ms since 1970 (UTC).
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
        let calendar = utcCalendar
        let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
        let start = calendar.date(from: calendar.dateComponents([.year, .month], from: date))!
        return Int64((start.timeIntervalSince1970 * 1000).rounded())
    }

    /// Makes sure each of `tables` has the partitions of the months of `instants` (ms since 1970).
    public func ensure(tables: [String] = notificationTables, monthsOf instants: [Int64], client: PostgresClient, logger: Logger) async throws {
        let months = Set(instants.map(Self.monthStart(ofMilliseconds:)))
        let wanted = tables.flatMap { table in months.map { Month(table: table, start: $0) } }
        let missing = known.withLock { known in wanted.filter { !known.contains($0) } }.sorted()
        guard !missing.isEmpty else { return }
        try await client.withConnection { connection in
            for month in missing {
                try await connection.query(
                    "SELECT ensure_time_partition(\(month.table)::regclass, 'month', to_timestamp(\(month.start) / 1000.0))", logger: logger)
            }
        }
        known.withLock { known in known.formUnion(missing) }
    }

    /// PostgreSQL's "no partition of relation … found for row" (SQLSTATE 23514), also inside a transaction's error.
    static func isMissingPartition(_ error: any Error) -> Bool {
        if let error = error as? PostgresTransactionError, let inner = error.closureError { return isMissingPartition(inner) }
        guard let error = error as? PSQLError, let info = error.serverInfo else { return false }
        return info[.sqlState] == "23514" && (info[.message] ?? "").hasPrefix("no partition")
    }

    /// Forgets what it has seen (after partitions were dropped, for example by retention), so the next batch checks again.
    public func forget() {
        known.withLock { $0.removeAll() }
    }
}
