import AppStoreNotifications
@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import Testing

extension EntitlementStoreTests {
    func archivedView(_ client: PostgresClient) async throws -> [String: String] {
        var rows: [String: String] = [:]
        for try await (uuid, jws) in try await client.query("SELECT notification_uuid, signed_payload FROM notifications", logger: Self.logger)
            .decode((String, String).self)
        {
            rows[uuid] = jws
        }
        return rows
    }

    @Test("the archive: one chain row, each JWS read back byte for byte (Swift and SQL), far fewer bytes")
    func compactArchive() async throws {
        let records = [
            try await notification("SUBSCRIBED", "INITIAL_BUY", day: 0), try await notification("DID_RENEW", day: 30),
            try await notification("EXPIRED", "VOLUNTARY", day: 60, status: 2),
        ]
        try await withStore { store, client in
            _ = try await store.store(records)
            #expect(try await count("jws_headers", client) == 1, "one test chain signs every JWS: stored once")
            #expect(try await count("notification_archive WHERE signed_payload IS NULL AND body IS NOT NULL", client) == 3)
            let view = try await archivedView(client)
            for record in records {
                let row = try #require(try await store.archivedNotification(uuid: record.deduplicationKey))
                #expect(row.compact && row.signedPayload == record.signedPayload, "Swift rebuild")
                #expect(view[record.deduplicationKey] == record.signedPayload, "SQL rebuild (the notifications view)")
                // The decoded payload is the exact JSON text that was signed.
                let segment = record.signedPayload.split(separator: ".")[1]
                #expect(Array(row.payload.utf8) == Base64.decode(segment, alphabet: .url))
            }
            var stored = 0
            for try await bytes in try await client.query(
                "SELECT sum(pg_column_size(n.*))::int FROM notification_archive n", logger: Self.logger
            ).decode(Int.self) { stored = bytes }
            let raw = records.reduce(0) { $0 + $1.signedPayload.utf8.count }
            #expect(stored * 3 < raw, "rows hold \(stored) bytes for \(raw) bytes of JWS")
            #expect(try await store.archivedNotification(uuid: "no-such-uuid") == nil)
        }
    }

    @Test("archive compact: rows archived raw (before migration 13) move in small batches, resumably; what does not rebuild stays raw")
    func compactMovesRawRows() async throws {
        var records: [StoredNotification] = []
        for day in stride(from: Int64(0), to: 300, by: 30) { records.append(try await notification("DID_RENEW", day: day)) }
        try await withStore { store, client in
            _ = try await store.store(records)
            // Turn them into rows as migrations 1-12 wrote them: raw JWS and decoded payload, no parts.
            _ = try await client.query(
                """
                UPDATE notification_archive n SET signed_payload = a.signed_payload, payload = a.payload, header_sha256 = NULL, body = NULL,
                    signature = NULL, nested_header_sha256 = NULL, nested_bodies = NULL, nested_signatures = NULL
                FROM notifications a WHERE a.notification_uuid = n.notification_uuid
                """, logger: Self.logger)
            _ = try await client.query("DELETE FROM jws_headers", logger: Self.logger)
            // And one row that is no JWS (a pulled status document is archived as its JSON).
            _ = try await client.query("INSERT INTO notification_ledger (notification_uuid, routing_key, signed_date) VALUES ('doc', 'doc', now())", logger: Self.logger)
            _ = try await client.query(
                """
                INSERT INTO notification_archive (notification_uuid, routing_key, notification_type, signed_date, environment, bundle_id, signed_payload,
                    payload)
                VALUES ('doc', 'doc', 'STATUS_SNAPSHOT', now(), 'Production', 'b', '{"data":[]}', '{"data":[]}')
                """, logger: Self.logger)
            let before = try await archivedView(client)
            #expect(before.count == records.count + 1 && records.allSatisfy { before[$0.deduplicationKey] == $0.signedPayload })

            // Interrupted after the first batches: what moved stays moved, and the rest is done by a second run.
            let first = try await store.compactArchive(batchSize: 3, maximumBatches: 2)
            #expect(first.moved + first.keptRaw == 6, "two batches of three")
            let second = try await store.compactArchive(batchSize: 3)
            #expect(first.moved + second.moved == records.count && second.keptRaw == 1)
            #expect(try await count("notification_archive WHERE signed_payload IS NULL", client) == records.count)
            #expect(try await archivedView(client) == before, "every row reads back byte for byte")
            #expect(try await store.compactArchive(batchSize: 3) == { var c = ArchiveCompaction(); c.keptRaw = 1; return c }(), "a third run moves nothing")
        }
    }
}
