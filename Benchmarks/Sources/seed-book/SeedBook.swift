import BookSeeding
import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import Synchronization
import TestSupport

/// Seeds a synthetic book (docs/scale.md, "A synthetic book"): SUBSCRIPTIONS lifecycles of
/// `NotificationMinter.bookLifecycle` (monthly and yearly, trials, renewals, billing retry and grace, refunds,
/// family sharing, two storefronts and currencies, starts over the two years that began 38 months ago; the outbox
/// holds the last week's events, published, as the relay and its retention leave it) into DATABASE (created
/// and migrated if missing, and empty of subscriptions; default a new `book_<random>`). The first TEMPLATES
/// lifecycles are written through the worker's own store path by WRITERS concurrent writers, nothing signed or
/// verified (`BookSeeder.seed`); then they are copied in SQL until the book holds SUBSCRIPTIONS, each copy with the
/// identifiers of its own index (`BookSeeder.copyTemplates`; `BookSeedingTests` holds the copies to the same
/// lifecycles minted, signed and stored). Prints the time of each step, the rows and the bytes of each table.
///
/// Usage: seed-book POSTGRES_URL [SUBSCRIPTIONS=100000] [WRITERS=2] [DATABASE] [TEMPLATES=20000]
/// (`SEED_SCHEMA_VERSION=N`: migrate the new database only up to version N.)
@main
struct SeedBook {
    static func main() async throws {
        let arguments = BenchArguments(usage: "seed-book POSTGRES_URL [SUBSCRIPTIONS] [WRITERS] [DATABASE] [TEMPLATES]", required: 1)
        let postgresURL = arguments[1]
        let subscriptions = arguments.int(2, default: 100_000)
        let writers = arguments.int(3, default: 2)
        let database = arguments.count > 4 && arguments[4] != "-" ? arguments[4] : "book_\(UUID().uuidString.prefix(8).lowercased())"
        let templates = min(subscriptions, arguments.int(5, default: 20_000))
        guard database.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) else {
            FileHandle.standardError.write(Data("seed-book: DATABASE must be letters, digits and underscores\n".utf8))
            exit(2)
        }
        var logger = Logger(label: "seed-book")
        logger.logLevel = .critical

        let admin = PostgresClient(configuration: try .init(url: postgresURL), backgroundLogger: logger)
        var configuration = try PostgresClient.Configuration(url: postgresURL)
        configuration.database = database
        configuration.options.maximumConnections = writers + 2
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await admin.run() }
            group.addTask { await client.run() }
            var exists = false
            for try await _ in try await admin.query("SELECT 1 FROM pg_database WHERE datname = \(database)", logger: logger).decode(Int.self) { exists = true }
            if !exists { try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: logger) }
            let store = EntitlementStore(client: client, logger: logger)
            // SEED_SCHEMA_VERSION: a book at an earlier schema version (for `pipelinectl migrate online`'s benchmark).
            _ = try await store.migrate(through: ProcessInfo.processInfo.environment["SEED_SCHEMA_VERSION"].flatMap { Int($0) })
            var existing = 0
            for try await count in try await client.query("SELECT count(*)::int FROM entitlements", logger: logger).decode(Int.self) { existing = count }
            guard existing == 0 else {
                FileHandle.standardError.write(Data("seed-book: database \(database) already holds \(existing) subscriptions; name a new one\n".utf8))
                exit(2)
            }
            print("seeding \(subscriptions) subscriptions into database \(database): \(templates) templates through the store path with \(writers) writers, then copies")

            let started = ContinuousClock.now
            let done = Counter()
            let seeder = BookSeeder(store: store, minter: minter)
            // Starts over the two years that began 38 months ago: the longest lifecycle (a trial, twelve months and a
            // recovery) ends before now. The outbox keeps the last week's events, published.
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let day: Int64 = 86_400_000
            let start = (now - 38 * 30 * day) / day * day
            let stored = try await seeder.seed(subscriptions: templates, templates: templates, writers: writers, start: start) { progress in
                let total = done.add(progress.subscriptions)
                if total % 100_000 < progress.subscriptions {
                    let seconds = BenchFigures.milliseconds(ContinuousClock.now - started) / 1_000
                    print(String(format: "  %d subscriptions, %.0f s", total, seconds))
                }
            }
            let templateSeconds = BenchFigures.milliseconds(ContinuousClock.now - started) / 1_000
            print(String(format: "templates: %d notifications in %.1f s (%.0f/s)", stored, templateSeconds, Double(stored) / templateSeconds))
            try await seeder.copyTemplates(templates: templates, subscriptions: subscriptions, writers: writers, eventsSince: now - 7 * day) { table, rows in
                let seconds = BenchFigures.milliseconds(ContinuousClock.now - started) / 1_000
                print(String(format: "  copied %@: %lld rows, %.0f s", table, rows, seconds))
            }
            let seconds = BenchFigures.milliseconds(ContinuousClock.now - started) / 1_000
            try await client.query("VACUUM ANALYZE", logger: logger)
            let analyzed = BenchFigures.milliseconds(ContinuousClock.now - started) / 1_000
            var transactions = 0
            for try await n in try await client.query("SELECT count(*)::int FROM transactions", logger: logger).decode(Int.self) { transactions = n }
            var notifications = 0
            for try await n in try await client.query("SELECT count(*)::int FROM notification_ledger", logger: logger).decode(Int.self) { notifications = n }
            print(String(format: "book: %d subscriptions, %d notifications, %d transactions in %.1f s (%.0f transactions/s), %.1f s with VACUUM ANALYZE",
                subscriptions, notifications, transactions, seconds, Double(transactions) / seconds, analyzed))
            print("table                          rows      heap+TOAST   indexes")
            let sizes = try await client.query(
                """
                SELECT c.relname::text, coalesce(sum(p.reltuples), c.reltuples)::bigint,
                    coalesce(sum(pg_table_size(p.oid)), pg_table_size(c.oid))::bigint, coalesce(sum(pg_indexes_size(p.oid)), pg_indexes_size(c.oid))::bigint
                FROM pg_class c LEFT JOIN pg_inherits i ON i.inhparent = c.oid LEFT JOIN pg_class p ON p.oid = i.inhrelid
                WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                GROUP BY c.oid, c.relname, c.reltuples ORDER BY 3 DESC LIMIT 12
                """, logger: logger)
            for try await (name, rows, heap, indexes) in sizes.decode((String, Int64, Int64, Int64).self) {
                print(name.padding(toLength: 30, withPad: " ", startingAt: 0) + String(format: " %9lld %10.1f MB %7.1f MB", rows, Double(heap) / 1e6, Double(indexes) / 1e6))
            }
            print("(database \(database) left for measuring: DROP DATABASE \(database) when done)")
            group.cancelAll()
        }
    }
}

/// Subscriptions seeded so far, across the writers.
final class Counter: Sendable {
    private let value = Mutex(0)
    func add(_ n: Int) -> Int { value.withLock { $0 += n; return $0 } }
}
