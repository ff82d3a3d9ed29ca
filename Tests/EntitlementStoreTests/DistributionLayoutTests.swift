@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestGates
import TestSupport
import Testing

/// The schema can be distributed by the routing key (issue: "Ready for a distributed PostgreSQL"): read from the
/// catalog of a database migrated to the latest version, every table is classified in `DistributionLayout`, and every
/// primary key, unique index and foreign key between distributed tables of a distributed table holds its routing
/// column, as Citus requires of a distributed table.
@Suite("Distribution layout against the catalog of a real PostgreSQL", .requiresPostgres)
struct DistributionLayoutTests {
    static let logger = quietLogger("distribution-layout-tests")

    static func strings(_ sql: String, _ client: PostgresClient) async throws -> [String] {
        var result: [String] = []
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(String.self) { result.append(value) }
        return result
    }

    @Test("every table is distributed, reference or local; every unique key and every foreign key between distributed tables holds the routing column")
    func catalog() async throws {
        try await withMigratedStore("distribution-layout", logger: Self.logger) { _, client in
            let tables = Set(try await Self.strings(
                "SELECT relname::text FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition", client))
            let distributed = Set(DistributionLayout.distributed.keys)
            let classified = distributed.union(DistributionLayout.reference).union(DistributionLayout.local)
            #expect(tables.subtracting(classified).isEmpty, "tables missing from DistributionLayout: \(tables.subtracting(classified).sorted())")
            #expect(classified.subtracting(tables).isEmpty, "DistributionLayout names tables that do not exist: \(classified.subtracting(tables).sorted())")
            #expect(distributed.intersection(DistributionLayout.reference).isEmpty && distributed.intersection(DistributionLayout.local).isEmpty)
            #expect(DistributionLayout.reference.intersection(DistributionLayout.local).isEmpty)

            // Each unique index (primary keys, unique constraints, partial unique indexes): "table index column,column".
            let uniqueKeys = try await Self.strings(
                """
                SELECT c.relname || ' ' || ic.relname || ' ' || string_agg(a.attname, ',' ORDER BY a.attname)
                FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid
                JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
                WHERE i.indisunique AND c.relnamespace = 'public'::regnamespace AND NOT c.relispartition
                GROUP BY c.relname, ic.relname ORDER BY 1
                """, client)
            var checked = 0
            for key in uniqueKeys {
                let parts = key.split(separator: " ").map(String.init)
                guard let column = DistributionLayout.distributed[parts[0]] else { continue }
                checked += 1
                #expect(parts[2].split(separator: ",").contains(Substring(column)), "\(parts[1]) on \(parts[0]) lacks the routing column \(column): (\(parts[2]))")
            }
            #expect(checked >= distributed.count, "every distributed table has a primary key: \(uniqueKeys)")
            for table in distributed {
                #expect(uniqueKeys.contains { $0.hasPrefix("\(table) ") }, "\(table) has no primary key")
            }

            // A foreign key between two distributed tables must join on the routing column of both.
            let foreignKeys = try await Self.strings(
                """
                SELECT c.relname || ' ' || r.relname || ' ' ||
                    (SELECT string_agg(a.attname, ',') FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = ANY(k.conkey)) || ' ' ||
                    (SELECT string_agg(a.attname, ',') FROM pg_attribute a WHERE a.attrelid = r.oid AND a.attnum = ANY(k.confkey))
                FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_class r ON r.oid = k.confrelid
                WHERE k.contype = 'f' AND c.relnamespace = 'public'::regnamespace AND NOT c.relispartition
                """, client)
            for key in foreignKeys {
                let parts = key.split(separator: " ").map(String.init)
                guard let from = DistributionLayout.distributed[parts[0]], let to = DistributionLayout.distributed[parts[1]] else { continue }
                #expect(parts[2].split(separator: ",").contains(Substring(from)) && parts[3].split(separator: ",").contains(Substring(to)), "\(key)")
            }
        }
    }

    @Test("docs/scale.md lists every distributed table with its routing column, and every reference and local table")
    func documented() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("docs/scale.md"), encoding: .utf8)
        for (table, column) in DistributionLayout.distributed {
            #expect(doc.contains("| `\(table)` | `\(column)` |"), "docs/scale.md: a row for \(table) distributed by \(column)")
        }
        for table in DistributionLayout.reference.union(DistributionLayout.local) {
            #expect(doc.contains("`\(table)`"), "docs/scale.md names \(table)")
        }
    }
}
