import AppStoreNotifications
import BookSeeding
@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestGates
import TestSigning
import TestSupport
import Testing

/// The seed tool's rows are the worker's (docs/scale.md, "A synthetic book"): a book seeded as the tool does it (a
/// few template lifecycles through the store's path, nothing signed, taken as verified; then copied in SQL with
/// their identifiers replaced) and the same lifecycles minted, signed, verified and stored one by one, each into a
/// database of its own, hold the same rows in every table the store writes, but for the signatures (the seed's are
/// a constant), the Kafka positions (a copy keeps its template's), the outbox's row ids (the order rows were
/// inserted in; the sequence within a subscription is compared) and the times the rows were written.
@Suite("Seeded book against a real PostgreSQL", .serialized, .requiresPostgres)
struct BookSeedingTests: MintedSuite {
    static let logger = quietLogger("book-seeding-tests")
    /// Inside the test chain's validity (2025-09-19 to 2027-10-13): the longest lifecycle ends a year and 70 days on.
    static let bookStart = TestDates.milliseconds("2025-10-01T00:00:00Z")
    static let subscriptions = 42
    /// Two of each ending (`index % 7`), yearly and monthly, both storefronts, a family-shared one: copied twice.
    static let templates = 14

    /// Each table the store writes, as sorted JSON rows without the columns that differ by design.
    static let tables: [(name: String, without: [String])] = [
        ("notification_ledger", ["first_seen_at"]),
        ("notification_archive", ["signature", "nested_signatures", "stored_at", "kafka_partition", "kafka_offset"]),
        ("notification_deliveries", ["stored_at", "kafka_partition", "kafka_offset"]),
        ("jws_headers", ["first_seen_at"]),
        ("transactions", []),
        ("transaction_grace", []),
        ("entitlements", ["updated_at"]),
        ("entitlement_events_outbox", ["created_at", "id"]),
    ]

    static func rows(_ client: PostgresClient) async throws -> [String: [String]] {
        var result: [String: [String]] = [:]
        for (table, without) in tables {
            let columns = try await existingColumns(table, without, client)
            var rows: [String] = []
            let query = PostgresQuery(unsafeSQL: "SELECT (to_jsonb(t) - \(columns))::text FROM \(table) t")
            for try await row in try await client.query(query, logger: logger).decode(String.self) { rows.append(row) }
            result[table] = rows.sorted()
        }
        return result
    }

    /// `without` as an SQL text array, each column checked to exist (a renamed column must not pass unnoticed).
    static func existingColumns(_ table: String, _ without: [String], _ client: PostgresClient) async throws -> String {
        for column in without {
            var found = false
            for try await _ in try await client.query(
                "SELECT 1 FROM information_schema.columns WHERE table_name = \(table) AND column_name = \(column)", logger: logger
            ).decode(Int.self) { found = true }
            #expect(found, "\(table).\(column)")
        }
        return "ARRAY[" + without.map { "'\($0)'" }.joined(separator: ",") + "]::text[]"
    }

    @Test("a seeded book (templates stored, then copied) equals the same lifecycles signed, verified and stored, but for signatures, positions and write times; it has its promised mix")
    func seededRowsAreTheWorkers() async throws {
        let events = NotificationMinter.bookEvents(subscriptions: Self.subscriptions, templates: Self.templates, start: Self.bookStart, spreadDays: 20)
        #expect(events.count > 3 * Self.subscriptions)
        let templateEvents = NotificationMinter.bookEvents(subscriptions: Self.templates, start: Self.bookStart, spreadDays: 20)
        var seeded: [String: [String]] = [:]
        try await withMigratedStore("book-seeded", logger: Self.logger) { store, client in
            let seeder = BookSeeder(store: store, minter: minter)
            let stored = try await seeder.seed(subscriptions: Self.templates, writers: 1, chunk: 1_000, batch: 50, start: Self.bookStart, spreadDays: 20)
            #expect(stored == templateEvents.count)
            try await seeder.copyTemplates(templates: Self.templates, subscriptions: Self.subscriptions, writers: 2, generationsPerStatement: 1)
            seeded = try await Self.rows(client)

            // The mix the book promises (BookLifecycles.swift), read from what was stored.
            let mix = try await TimePartitionTests.strings(
                """
                SELECT 'ownership ' || ownership_type FROM transactions GROUP BY 1
                UNION SELECT 'currency ' || currency FROM transactions GROUP BY 1
                UNION SELECT 'product ' || product_id FROM transactions GROUP BY 1
                UNION SELECT 'offer ' || (payload->>'offerDiscountType') FROM transactions WHERE payload ? 'offerDiscountType' GROUP BY 1
                UNION SELECT 'status ' || status FROM entitlements GROUP BY 1
                UNION SELECT 'grace' FROM transaction_grace GROUP BY 1
                """, client)
            for expected in [
                "ownership FAMILY_SHARED", "ownership PURCHASED", "currency EUR", "currency USD", "product \(NotificationMinter.bookYearlyProduct)",
                "product \(NotificationMinter.bookMonthlyProduct)", "offer FREE_TRIAL", "status active", "status expired", "status refunded", "grace",
            ] {
                #expect(mix.contains(expected), "\(expected) in \(mix)")
            }
        }
        try await withMigratedStore("book-minted", logger: Self.logger) { store, client in
            var batch: [StoredNotification] = []
            for (offset, event) in events.enumerated() {
                let signed = minter.signedNotification(event)
                batch.append(StoredNotification(
                    verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "seed", kafkaPartition: 0,
                    kafkaOffset: Int64(offset), receivedAt: Timestamp(millisecondsSince1970: event.signedDate), source: "seed"))
                if batch.count == 50 {
                    _ = try await store.store(batch)
                    batch.removeAll()
                }
            }
            _ = try await store.store(batch)
            let minted = try await Self.rows(client)
            for (table, _) in Self.tables {
                let a = seeded[table] ?? [], b = minted[table] ?? []
                #expect(!a.isEmpty || table == "transaction_grace", "\(table) holds rows")
                #expect(a.count == b.count, "\(table): \(a.count) seeded rows, \(b.count) minted")
                let differing = zip(a, b).filter { $0 != $1 }.prefix(1)
                #expect(differing.isEmpty, "\(table) differs: \(differing.map { "seeded \($0.0)\nminted \($0.1)" })")
            }
        }
    }
}
