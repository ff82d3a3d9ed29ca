import Logging
import PostgresNIO

/// Searches a whole database for identifiers, as a privacy audit would: every text, json, jsonb and array column of
/// every table (a partitioned table once, through its parent). What the erasure tests hold the pipeline to (and the external harness checks the same way).
package enum DatabaseScan {
    static let logger = Logger(label: "database-scan")

    /// Every (table, column) searched.
    package static func textColumns(_ client: PostgresClient) async throws -> [(table: String, column: String)] {
        var columns: [(String, String)] = []
        for try await (table, column) in try await client.query(
            """
            SELECT c.table_name, c.column_name FROM information_schema.columns c
            JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'
            WHERE c.table_schema = 'public' AND c.data_type IN ('text', 'json', 'jsonb', 'ARRAY', 'character varying')
                AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid WHERE k.relname = c.table_name)
            ORDER BY 1, 2
            """,
            logger: logger
        ).decode((String, String).self) { columns.append((table, column)) }
        return columns
    }

    /// `table.column` → rows that mention any of `needles` (substring), for every text column outside `except`.
    package static func mentions(of needles: [String], in client: PostgresClient, except: Set<String> = []) async throws -> [String: Int] {
        let patterns = needles.map { "%" + $0 + "%" }
        var found: [String: Int] = [:]
        for (table, column) in try await textColumns(client) where !except.contains(table) {
            var binds = PostgresBindings()
            binds.append(patterns)
            let query = PostgresQuery(unsafeSQL: "SELECT count(*) FROM \"\(table)\" WHERE \"\(column)\"::text LIKE ANY($1::text[])", binds: binds)
            for try await count in try await client.query(query, logger: logger).decode(Int64.self) where count > 0 { found["\(table).\(column)"] = Int(count) }
        }
        return found
    }

    /// Per table, a digest of the rows that mention none of `needles` (whole rows as JSON), outside `except` and
    /// rows mentioning any of `ignoring`: what must stay byte-identical when only the needles' owner is erased.
    package static func digestOfOthers(
        excluding needles: [String], in client: PostgresClient, except: Set<String>, ignoring: [String] = []
    ) async throws -> [String: String] {
        var tables: [String] = []
        for try await table in try await client.query(
            """
            SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
                AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid WHERE k.relname = table_name)
            """,
            logger: logger
        ).decode(String.self) where !except.contains(table) { tables.append(table) }
        let patterns = (needles + ignoring).map { "%" + $0 + "%" }
        var digests: [String: String] = [:]
        for table in tables {
            var binds = PostgresBindings()
            binds.append(patterns)
            let query = PostgresQuery(unsafeSQL: """
                SELECT coalesce(md5(string_agg(r, '|' ORDER BY r)), '') FROM (SELECT row_to_json(x)::text AS r FROM "\(table)" x) s
                WHERE NOT (r LIKE ANY($1::text[]))
                """, binds: binds)
            for try await digest in try await client.query(query, logger: logger).decode(String.self) { digests[table] = digest }
        }
        return digests
    }
}
