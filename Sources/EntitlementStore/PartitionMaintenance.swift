import Foundation
import Logging
import PostgresNIO

/// The time partitions of the tables that grow with time (docs/scale.md): creates the coming ones ahead of the
/// rows that need them, lists them, and drops whole ones for retention without stopping the writers.
public struct PartitionMaintenance: Sendable {
    public let client: PostgresClient
    let logger: Logger
    /// How long a drop waits for a lock before it gives up and tries again (`lock_timeout`): a drop must never
    /// hold up the workers' inserts longer than this.
    public var lockTimeout: Duration = .milliseconds(200)
    /// How often a drop that timed out on a lock is tried again within one call.
    public var attempts = 10

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// One partition: its table, its parent, and the range of the partition key it holds.
    public struct Partition: Sendable, Hashable {
        public var name: String
        public var parent: String
        public var lowerBound: Date
        public var upperBound: Date
        /// A `DETACH … CONCURRENTLY` that was interrupted: the next drop finishes it.
        public var detachPending: Bool
    }

    /// Creates the partitions of this month and the next `months` months (UTC) of every notification table and
    /// webhook table, and of today and the next `months` days of the outbox, so the usual batch finds its
    /// partition made (`TimePartitions` creates any other on demand).
    public func createComing(months: Int = 2, now: Date = Date()) async throws {
        let first = Date(timeIntervalSince1970: Double(TimePartitions.monthStart(ofMilliseconds: Int64(now.timeIntervalSince1970 * 1000))) / 1000)
        let instants = (0...months).map { Int64(TimePartitions.utcCalendar.date(byAdding: .month, value: $0, to: first)!.timeIntervalSince1970 * 1000) }
        let partitions = TimePartitions()
        try await partitions.ensure(tables: TimePartitions.notificationTables + TimePartitions.webhookTables, monthsOf: instants, client: client, logger: logger)
        let days = (0...months).map { Int64(now.addingTimeInterval(Double($0) * 86_400).timeIntervalSince1970 * 1000) }
        try await partitions.ensure(tables: [TimePartitions.outboxTable], period: .day, instants: days, client: client, logger: logger)
    }

    /// The partitions of `parent`, oldest first.
    public func partitions(of parent: String) async throws -> [Partition] {
        var result: [Partition] = []
        let rows = try await client.query(
            """
            SELECT c.relname::text, i.inhdetachpending,
                (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz,
                (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = \(parent)::regclass
            ORDER BY 3
            """,
            logger: logger)
        for try await (name, pending, lower, upper) in rows.decode((String, Bool, Date?, Date?).self) {
            guard let lower, let upper else { continue }
            result.append(Partition(name: name, parent: parent, lowerBound: lower, upperBound: upper, detachPending: pending))
        }
        return result
    }

    /// The partitions of `parent` whose every row is before `cutoff`.
    public func partitions(of parent: String, endingBy cutoff: Date) async throws -> [Partition] {
        try await partitions(of: parent).filter { $0.upperBound <= cutoff }
    }

    /// Rows in a partition (exact; what retention reports as deleted).
    public func rowCount(of partition: Partition) async throws -> Int {
        var total = 0
        for try await count in try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(Self.quoted(partition.name))"), logger: logger)
            .decode(Int64.self) { total = Int(count) }
        return total
    }

    /// Drops `partition`: `DETACH PARTITION … CONCURRENTLY` (only a SHARE UPDATE EXCLUSIVE lock on the parent, so
    /// inserts and reads of the other partitions go on; it waits for the transactions that still see the
    /// partition), then `DROP TABLE` of what is now a table of its own. Each step waits at most `lockTimeout` for
    /// a lock, and is tried again up to `attempts` times; a detach interrupted earlier is finished (`FINALIZE`).
    public func drop(_ partition: Partition) async throws {
        let parent = Self.quoted(partition.parent)
        let name = Self.quoted(partition.name)
        let timeout = lockTimeout.components.seconds * 1000 + lockTimeout.components.attoseconds / 1_000_000_000_000_000
        try await client.withConnection { connection in
            try await connection.query(PostgresQuery(unsafeSQL: "SET lock_timeout = '\(timeout)ms'"), logger: logger)
            do {
                try await drop(partition, parent: parent, name: name, on: connection)
                try await connection.query("RESET lock_timeout", logger: logger)
            } catch {
                _ = try? await connection.query("RESET lock_timeout", logger: logger)
                throw error
            }
        }
    }

    func drop(_ partition: Partition, parent: String, name: String, on connection: PostgresConnection) async throws {
        var attempt = 0
        while true {
            attempt += 1
            do {
                // Read each time: a detach that timed out in its second transaction is left pending.
                if let pending = try await detachState(partition, on: connection) {
                    let detach = pending ? "FINALIZE" : "CONCURRENTLY"
                    try await connection.query(PostgresQuery(unsafeSQL: "ALTER TABLE \(parent) DETACH PARTITION \(name) \(detach)"), logger: logger)
                }
                try await connection.query(PostgresQuery(unsafeSQL: "DROP TABLE IF EXISTS \(name)"), logger: logger)
                if partition.parent == "notification_archive" {
                    // The metrics' refund-request counts of that month go with it, as the full computation sees it.
                    try await connection.query("SELECT metric_rollups_forget_archive(\(partition.lowerBound), \(partition.upperBound))", logger: logger)
                }
                return
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "55P03" && attempt < attempts {
                logger.debug("partition drop waited too long for a lock, tried again", metadata: ["partition": "\(partition.name)"])
                try await Task.sleep(for: .milliseconds(250))
            }
        }
    }

    /// Nil when `partition` is no longer attached; else whether its detach is pending.
    func detachState(_ partition: Partition, on connection: PostgresConnection) async throws -> Bool? {
        var state: Bool?
        for try await pending in try await connection.query(
            """
            SELECT i.inhdetachpending FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = \(partition.parent)::regclass AND c.relname = \(partition.name)
            """,
            logger: logger
        ).decode(Bool.self) { state = pending }
        return state
    }

    public static func quoted(_ identifier: String) -> String { "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
}
