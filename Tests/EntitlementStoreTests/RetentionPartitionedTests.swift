@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestGates
import TestSupport
import Testing

/// The retention job's row-by-row delete on a partitioned table: each partition has its own ctids, so a row of the
/// new partition stands at the same place as an old one of the old partition. Deleting "the old rows' ctids"
/// through the parent took both (it would have, the day a pruned table became partitioned: issue 56).
@Suite("Retention: row deletes on a partitioned table", .serialized, .requiresPostgres)
struct RetentionPartitionedTests {
    static let logger = quietLogger("retention-partitioned-tests")

    @Test("old rows of one partition go; the other partition's rows at the same ctids stay; a plain table still prunes")
    func prunesLeafByLeaf() async throws {
        try await withMigratedStore("prunepart", logger: Self.logger) { _, client in
            for statement in [
                "CREATE TABLE prune_probe (at timestamptz NOT NULL, k int NOT NULL) PARTITION BY RANGE (at)",
                "CREATE TABLE prune_probe_old PARTITION OF prune_probe FOR VALUES FROM ('2020-01-01') TO ('2021-01-01')",
                "CREATE TABLE prune_probe_new PARTITION OF prune_probe FOR VALUES FROM ('2021-01-01') TO ('2030-01-01')",
                // The same ten ctids, (0,1)…(0,10), in each partition: old rows in the first, recent ones in the second.
                "INSERT INTO prune_probe SELECT '2020-03-01'::timestamptz + k * interval '1 day', k FROM generate_series(1, 10) k",
                "INSERT INTO prune_probe SELECT '2029-03-01'::timestamptz + k * interval '1 day', 100 + k FROM generate_series(1, 10) k",
                "CREATE TABLE prune_plain (at timestamptz NOT NULL, k int NOT NULL)",
                "INSERT INTO prune_plain SELECT '2020-03-01'::timestamptz + k * interval '1 day', k FROM generate_series(1, 10) k",
                "INSERT INTO prune_plain SELECT '2029-03-01'::timestamptz + k * interval '1 day', 100 + k FROM generate_series(1, 10) k",
            ] {
                try await client.query(PostgresQuery(unsafeSQL: statement), logger: Self.logger)
            }
            var sameCtids = 0
            for try await n in try await client.query(
                "SELECT count(*) FROM prune_probe_old o JOIN prune_probe_new n ON o.ctid = n.ctid", logger: Self.logger
            ).decode(Int64.self) { sameCtids = Int(n) }
            #expect(sameCtids == 10, "the partitions share their ctids (what makes a delete through the parent wrong)")

            var retention = RetentionStore(client: client, logger: Self.logger)
            retention.batchSize = 3  // several batches per leaf
            let cutoff = Date(timeIntervalSince1970: 1_609_459_200)  // 2021-01-01
            #expect(try await retention.pruneRows(of: "prune_probe", olderThan: cutoff, by: "at", filter: "", ordered: true, dryRun: true) == 10)
            #expect(try await retention.pruneRows(of: "prune_probe", olderThan: cutoff, by: "at", filter: "", ordered: true, dryRun: false) == 10)
            #expect(try await retention.pruneRows(of: "prune_plain", olderThan: cutoff, by: "at", filter: "", ordered: false, dryRun: false) == 10)
            for table in ["prune_probe", "prune_plain"] {
                var left: [Int] = []
                for try await k in try await client.query(PostgresQuery(unsafeSQL: "SELECT k FROM \(table) ORDER BY k"), logger: Self.logger).decode(Int32.self) {
                    left.append(Int(k))
                }
                #expect(left == Array(101...110), "\(table): only the recent rows remain, all of them: \(left)")
            }
        }
    }
}
