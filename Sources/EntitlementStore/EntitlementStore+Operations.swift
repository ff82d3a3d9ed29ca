import Foundation
import PostgresNIO

/// A dead letter's place in its topic.
public struct RecordPosition: Sendable, Hashable, Comparable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }

    public static func < (lhs: RecordPosition, rhs: RecordPosition) -> Bool {
        (lhs.topic, lhs.partition, lhs.offset) < (rhs.topic, rhs.partition, rhs.offset)
    }

    public var description: String { "\(topic)/\(partition)/\(offset)" }
}

extension EntitlementStore {
    /// Migrations not applied yet (all of them on an empty database).
    public func pendingMigrations() async throws -> [Migrations.Migration] {
        var exists = false
        for try await flag in try await client.query("SELECT to_regclass('schema_migrations') IS NOT NULL", logger: logger).decode(Bool.self) { exists = flag }
        guard exists else { return Migrations.all }
        var applied: Set<Int> = []
        for try await version in try await client.query("SELECT version FROM schema_migrations", logger: logger).decode(Int.self) { applied.insert(version) }
        return Migrations.all.filter { !applied.contains($0.version) }
    }

    /// Runs `body` holding the session advisory lock `key`, on a connection of its own; refused at once (not
    /// queued) when another session holds it.
    public func withAdvisoryLock<T: Sendable>(_ key: Int64, name: String, _ body: () async throws -> T) async throws -> T {
        try await client.withConnection { connection in
            var locked = false
            for try await value in try await connection.query("SELECT pg_try_advisory_lock(\(key))", logger: logger).decode(Bool.self) { locked = value }
            guard locked else { throw AdvisoryLockHeld(name: name) }
            do {
                let result = try await body()
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(key))", logger: logger)
                return result
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(key))", logger: logger)
                throw error
            }
        }
    }

    /// Publishes dead letters once across every owner of their partitions. In one transaction: a lock per original
    /// (topic, partition), held until it commits; the positions already dead-lettered, by a committed batch (no
    /// place given) or by a claim (with where that letter landed); `publish` for the others, which returns where
    /// each letter it got acknowledged landed; a claim for each of those. A partition's next owner after a
    /// rebalance, reading a batch its first owner is still writing, waits on the lock and then finds the claim,
    /// where before it found nothing until the first owner's batch committed and published a second letter. A
    /// worker killed between the broker's acknowledgement and this commit still re-sends once (its claim rolled
    /// back with it): `dlq list` and `redrive` dedupe by position.
    public func withDeadLetterClaim<Published: Sendable>(
        _ positions: [RecordPosition],
        publish: (_ alreadySent: [RecordPosition: RecordPosition?]) async throws -> (Published, claims: [RecordPosition: RecordPosition])
    ) async throws -> (alreadySent: [RecordPosition: RecordPosition?], published: Published) {
        try await client.withTransaction(logger: logger) { connection in
            let partitions = Set(positions.map { "\($0.topic)\u{1F}\($0.partition)" }).sorted()
            for partition in partitions {
                // Two-key advisory locks are a space of their own (the others here take one bigint key).
                _ = try await connection.query("SELECT pg_advisory_xact_lock(25, hashtext(\(partition)))", logger: logger)
            }
            var alreadySent: [RecordPosition: RecordPosition?] = [:]
            let rows = try await connection.query(
                """
                SELECT p.topic, p.partition, p."offset", c.dead_letter_topic, c.dead_letter_partition, c.dead_letter_offset
                FROM unnest(\(positions.map(\.topic))::text[], \(positions.map(\.partition))::integer[], \(positions.map(\.offset))::bigint[])
                    AS p(topic, partition, "offset")
                LEFT JOIN dead_letter_claims c
                    ON c.original_topic = p.topic AND c.original_partition = p.partition AND c.original_offset = p."offset"
                WHERE c.original_offset IS NOT NULL OR EXISTS (
                    SELECT 1 FROM dead_lettered_records d
                    WHERE d.original_topic = p.topic AND d.original_partition = p.partition AND d.original_offset = p."offset")
                """,
                logger: logger)
            for try await (topic, partition, offset, letterTopic, letterPartition, letterOffset) in rows.decode((String, Int32, Int64, String?, Int32?, Int64?).self) {
                let letter = letterTopic.flatMap { topic in letterPartition.flatMap { partition in letterOffset.map { RecordPosition(topic: topic, partition: partition, offset: $0) } } }
                alreadySent[RecordPosition(topic: topic, partition: partition, offset: offset)] = .some(letter)
            }
            let (published, claims) = try await publish(alreadySent)
            if !claims.isEmpty {
                let ordered = claims.sorted { $0.key < $1.key }
                try await connection.query(
                    """
                    INSERT INTO dead_letter_claims (original_topic, original_partition, original_offset, dead_letter_topic, dead_letter_partition, dead_letter_offset)
                    SELECT * FROM unnest(\(ordered.map(\.key.topic))::text[], \(ordered.map(\.key.partition))::integer[], \(ordered.map(\.key.offset))::bigint[],
                        \(ordered.map(\.value.topic))::text[], \(ordered.map(\.value.partition))::integer[], \(ordered.map(\.value.offset))::bigint[])
                    ON CONFLICT DO NOTHING
                    """,
                    logger: logger)
            }
            return (alreadySent, published)
        }
    }

    /// The dead letters of `topic` already re-driven (so a re-run never re-drives one twice).
    public func redrivenDeadLetters(topic: String) async throws -> Set<RecordPosition> {
        var positions: Set<RecordPosition> = []
        let rows = try await client.query(
            "SELECT dead_letter_partition, dead_letter_offset FROM dead_letter_redrives WHERE dead_letter_topic = \(topic)", logger: logger)
        for try await (partition, offset) in rows.decode((Int32, Int64).self) {
            positions.insert(RecordPosition(topic: topic, partition: partition, offset: offset))
        }
        return positions
    }

    /// Records that the dead letter at `from` was re-published at `to`.
    public func recordRedrive(from: RecordPosition, errorCode: String?, to: RecordPosition) async throws {
        try await client.query(
            """
            INSERT INTO dead_letter_redrives (dead_letter_topic, dead_letter_partition, dead_letter_offset, error_code,
                redriven_to_topic, redriven_to_partition, redriven_to_offset)
            VALUES (\(from.topic), \(from.partition), \(from.offset), \(errorCode), \(to.topic), \(to.partition), \(to.offset))
            ON CONFLICT DO NOTHING
            """,
            logger: logger)
    }
}

/// Another session runs the same operation now.
public struct AdvisoryLockHeld: Error, CustomStringConvertible {
    public var name: String
    public var description: String { "another \(name) is running (its advisory lock is held); try again when it has finished" }
}
