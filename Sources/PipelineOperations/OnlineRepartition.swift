import EntitlementStore
import Foundation
import Logging
import PostgresNIO

/// Moves the outbox and the webhook tables to their time partitions (migration 28) beside the running writers,
/// so that the migration itself only swaps (`pipelinectl migrate online`, docs/scale.md). For a large table: the
/// migration alone copies inside its transaction, and the writers wait for it.
///
/// 1. **Prepare** (idempotent): the partitioned twins with their indexes, the partitions their rows need, and a
///    trigger on each old table that mirrors every insert, update and delete into the twin (a delete also leaves a
///    tombstone). Creating the triggers waits for the writers' open transactions and is bounded by `lockTimeout`,
///    retried; from then on every write reaches the twin.
/// 2. **Copy** the old rows in batches by id, each batch a short transaction of its own that also records how far
///    it got (`online_repartition_progress`), so an interrupted copy resumes there. A row the trigger wrote first
///    is left as the trigger wrote it (the trigger's is the newer version).
/// 3. **Swap**: migration 28 (`pipelinectl migrate`, or the first worker of the new version) locks the three old
///    tables, copies what the last batch did not reach, applies the tombstones (a row the copy read just before
///    it was deleted), drops the old tables and renames the twins.
public struct OnlineRepartition: Sendable {
    public let client: PostgresClient
    let logger: Logger
    /// Rows per batch of the copy.
    public var batchSize = 10_000
    /// How long creating a trigger waits for the writers before it gives up and tries again.
    public var lockTimeout: Duration = .milliseconds(500)

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// The migration whose tables this prepares.
    public static let version = Migrations.eventPartitions.version

    /// Why the copy cannot run on this database.
    public enum Refusal: Error, CustomStringConvertible {
        case alreadyApplied
        case earlierMigrationsPending([Int])

        public var description: String {
            switch self {
            case .alreadyApplied:
                return "migration \(OnlineRepartition.version) is applied: the outbox and the webhook tables are partitioned already"
            case .earlierMigrationsPending(let versions):
                return "migrations \(versions.map(String.init).joined(separator: ", ")) come first: run `pipelinectl migrate --through \(OnlineRepartition.version - 1)`, then this again"
            }
        }
    }

    /// One table's copy.
    public struct TableCopy: Sendable {
        public var table: String
        public var rowsRead: Int64 = 0
        public var rowsInserted: Int64 = 0
        public var batches = 0
        public var seconds = 0.0
    }

    /// Checks the schema stands just before migration 28.
    public func checkReady() async throws {
        let pending = try await EntitlementStore(client: client, logger: logger).pendingMigrations().map(\.version)
        guard pending.contains(Self.version) else { throw Refusal.alreadyApplied }
        let earlier = pending.filter { $0 < Self.version }
        guard earlier.isEmpty else { throw Refusal.earlierMigrationsPending(earlier) }
    }

    /// Step 1: the twins, their partitions and the mirroring triggers (idempotent).
    public func prepare() async throws {
        try await checkReady()
        for statement in Migrations.repartitionSupport {
            try await client.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        for table in RepartitionedTable.eventTables {
            for statement in table.twinDefinition + table.partitionsForRows + [table.mirrorFunction] {
                try await client.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        }
        let milliseconds = lockTimeout.components.seconds * 1000 + lockTimeout.components.attoseconds / 1_000_000_000_000_000
        var attempt = 0
        while true {
            attempt += 1
            do {
                try await client.withTransaction(logger: logger) { connection in
                    try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = '\(milliseconds)ms'"), logger: logger)
                    for table in RepartitionedTable.eventTables {
                        try await connection.query(
                            PostgresQuery(unsafeSQL: """
                                CREATE OR REPLACE TRIGGER \(table.table)_mirror AFTER INSERT OR UPDATE OR DELETE ON \(table.table)
                                FOR EACH ROW EXECUTE FUNCTION \(table.table)_mirror()
                                """), logger: logger)
                        try await connection.query(
                            "INSERT INTO online_repartition_progress (table_name) VALUES (\(table.table)) ON CONFLICT DO NOTHING", logger: logger)
                    }
                }
                return
            } catch let error as PostgresTransactionError where attempt < 20 && Self.isLockTimeout(error) {
                logger.info("creating the mirroring triggers waited too long for the writers, tried again")
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    static func isLockTimeout(_ error: PostgresTransactionError) -> Bool {
        for inner in [error.closureError, error.beginError, error.commitError] {
            if let psql = inner as? PSQLError, psql.serverInfo?[.sqlState] == "55P03" { return true }
        }
        return false
    }

    /// Step 2: copies every table's rows the copy has not reached yet, batch by batch. `progress` hears of each batch.
    public func copy(progress: @Sendable (TableCopy) -> Void = { _ in }) async throws -> [TableCopy] {
        try await checkReady()
        var copies: [TableCopy] = []
        for table in RepartitionedTable.eventTables {
            var copy = TableCopy(table: table.table)
            let started = ContinuousClock.now
            while true {
                let (read, inserted) = try await client.withTransaction(logger: logger) { connection in
                    var from: Int64 = 0
                    for try await value in try await connection.query(
                        "SELECT copied_through FROM online_repartition_progress WHERE table_name = \(table.table) FOR UPDATE", logger: logger
                    ).decode(Int64.self) { from = value }
                    var binds = PostgresBindings()
                    binds.append(from)
                    binds.append(batchSize)
                    var last = from
                    var read: Int64 = 0
                    var inserted: Int64 = 0
                    for try await (through, rows, added) in try await connection.query(PostgresQuery(unsafeSQL: table.copyBatch, binds: binds), logger: logger)
                        .decode((Int64, Int64, Int64).self) { (last, read, inserted) = (through, rows, added) }
                    try await connection.query(
                        "UPDATE online_repartition_progress SET copied_through = \(last) WHERE table_name = \(table.table)", logger: logger)
                    return (read, inserted)
                }
                copy.rowsRead += read
                copy.rowsInserted += inserted
                copy.batches += 1
                copy.seconds = Self.seconds(since: started)
                progress(copy)
                if read < batchSize { break }
            }
            copies.append(copy)
        }
        return copies
    }

    /// Rows of each old table and of its twin (they agree once the copy caught up, but for writes in flight).
    public func counts() async throws -> [(table: String, old: Int64, twin: Int64)] {
        var result: [(String, Int64, Int64)] = []
        for table in RepartitionedTable.eventTables {
            var counts: (Int64, Int64) = (0, 0)
            for try await row in try await client.query(
                PostgresQuery(unsafeSQL: "SELECT (SELECT count(*) FROM \(table.table)), (SELECT count(*) FROM \(table.twin))"), logger: logger
            ).decode((Int64, Int64).self) { counts = row }
            result.append((table.table, counts.0, counts.1))
        }
        return result
    }

    static func seconds(since start: ContinuousClock.Instant) -> Double {
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}
