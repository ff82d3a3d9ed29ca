@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestGates
import TestSigning
import TestSupport
import Testing

/// The notification tables' monthly partitions (migration 21, docs/scale.md), read from PostgreSQL's catalog, and
/// the dedupe promise kept across the migration.
@Suite("Time partitions of the notification tables against a real PostgreSQL", .serialized, .requiresPostgres)
struct TimePartitionTests: MintedSuite {
    static let logger = quietLogger("partition-tests")

    func stored(_ event: NotificationMinter.SubscriptionEvent, offset: Int64) async throws -> StoredNotification {
        let signed = minter.signedNotification(event)
        return StoredNotification(
            verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: offset)
    }

    static func strings(_ sql: String, _ client: PostgresClient) async throws -> [String] {
        var result: [String] = []
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(String.self) { result.append(value) }
        return result
    }

    @Test("each notification table is partitioned by month of signedDate, each of its unique keys holds the routing key and the date; a batch makes the months it needs")
    func catalog() async throws {
        try await withMigratedStore("partitions-catalog", logger: Self.logger) { store, client in
            let keys = try await Self.strings(
                """
                SELECT c.relname || ' ' || pg_get_partkeydef(c.oid) FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
                WHERE NOT c.relispartition ORDER BY 1
                """, client)
            for table in TimePartitions.notificationTables {
                #expect(keys.contains("\(table) RANGE (signed_date)"), "\(keys)")
            }
            let uniqueKeys = try await Self.strings(
                """
                SELECT c.relname || ':' || string_agg(a.attname, ',' ORDER BY a.attname)
                FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
                WHERE i.indisunique AND c.relname IN ('notification_ledger', 'notification_archive', 'notification_deliveries')
                GROUP BY i.indexrelid, c.relname ORDER BY 1
                """, client)
            #expect(uniqueKeys.count == 3, "\(uniqueKeys)")
            for key in uniqueKeys {
                let columns = key.split(separator: ":")[1].split(separator: ",")
                #expect(columns.contains("routing_key") && columns.contains("signed_date"), "\(key)")
            }

            // A notification signed in October 2025 (a backfill or an import): its month is made for it, in the three tables.
            var old = NotificationMinter.SubscriptionEvent.sample(seed: 8_001, signedDate: TestDates.milliseconds("2025-10-15T12:00:00Z"))
            old.purchaseDate = old.signedDate
            old.expiresDate = old.signedDate + 30 * Self.day
            let record = try await stored(old, offset: 1)
            #expect(try await store.store([record]).applied == 1)
            let march = try await Self.strings(
                "SELECT relname::text FROM pg_class WHERE relname LIKE 'notification_%_2025_10' ORDER BY 1", client)
            #expect(march == ["notification_archive_2025_10", "notification_deliveries_2025_10", "notification_ledger_2025_10"])
            let routingKey = try await Self.strings("SELECT routing_key FROM notification_ledger_2025_10", client)
            #expect(routingKey == [old.originalTransactionId], "the ledger's routing key is the Kafka key")
            #expect(try await store.store([record]).duplicates == 1)

            // The maintenance round's months ahead: the month of `now` and the next two, in each table.
            try await PartitionMaintenance(client: client, logger: Self.logger).createComing(now: TestDates.date("2027-11-20T08:00:00Z"))
            let ahead = try await Self.strings(
                "SELECT relname::text FROM pg_class WHERE relname ~ '^notification_ledger_(2027_1[12]|2028_0[12])$' ORDER BY 1", client)
            #expect(ahead == ["notification_ledger_2027_11", "notification_ledger_2027_12", "notification_ledger_2028_01"])
        }
    }

    @Test("rows of version 20 carry over: a replay of one whose routing key was derived otherwise, or whose archive row was pruned, is still a duplicate")
    func migratedRowsStayDuplicates() async throws {
        let url = try await FreshDatabase.create(FreshDatabase.uniqueName("partitions-migrated"), on: try RequiredServices.postgresURL, logger: Self.logger)
        let withoutTransaction = NotificationMinter.SubscriptionEvent.sample(seed: 8_101, signedDate: Self.start)
        let pruned = NotificationMinter.SubscriptionEvent.sample(seed: 8_102, signedDate: Self.start + 40 * Self.day)
        let fresh = NotificationMinter.SubscriptionEvent.sample(seed: 8_103, signedDate: Self.start + 41 * Self.day)
        let records = [
            try await stored(withoutTransaction, offset: 1), try await stored(pruned, offset: 2), try await stored(fresh, offset: 3),
        ]
        try await FreshDatabase.withClient(url, logger: Self.logger) { client in
            // The schema as version 20 left it, and two notifications as it stored them: one archived without an
            // original transaction id (its routing key is taken to be its UUID), one whose archive row was pruned.
            try await client.query(
                "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
                logger: Self.logger)
            for migration in Migrations.all.prefix(20) {
                for statement in migration.sql { try await client.query(PostgresQuery(unsafeSQL: statement), logger: Self.logger) }
                try await client.query("INSERT INTO schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))", logger: Self.logger)
            }
            let first = records[0]
            try await client.query("INSERT INTO notification_ledger (notification_uuid) VALUES (\(first.deduplicationKey)), (\(records[1].deduplicationKey))", logger: Self.logger)
            try await client.query(
                """
                INSERT INTO notification_archive (notification_uuid, notification_type, signed_date, environment, bundle_id, signed_payload, payload)
                VALUES (\(first.deduplicationKey), 'DID_RENEW', to_timestamp(\(withoutTransaction.signedDate) / 1000.0), 'Production', \(minter.bundleId),
                    \(first.signedPayload), '{}')
                """, logger: Self.logger)

            let store = EntitlementStore(client: client, logger: Self.logger)
            #expect(try await store.migrate() == Migrations.all.map(\.version).filter { $0 > 20 })
            #expect(try await Self.strings("SELECT routing_key FROM notification_ledger WHERE notification_uuid = '\(first.deduplicationKey)'", client)
                == [first.deduplicationKey], "the copy's routing key differs from the worker's: \(first.routingKey)")
            #expect(first.routingKey != first.deduplicationKey)
            #expect(try await Self.strings("SELECT notification_uuid FROM notification_ledger_undated", client) == [records[1].deduplicationKey])

            let outcome = try await store.store(records)
            #expect(outcome.duplicates == 2 && outcome.applied == 1, "\(outcome)")
            #expect(try await Self.strings("SELECT notification_uuid FROM notification_archive", client).sorted()
                == [first.deduplicationKey, records[2].deduplicationKey].sorted(), "only the new notification is archived anew")
        }
    }
}
