import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import Testing
import TestSupport
import TestGates

/// The one way a test gets a database of its own: created on the test cluster (`POSTGRES_URL`) under a unique name,
/// never shared, left behind for a person to read after a failure (the cluster is a test one).
package enum FreshDatabase {
    /// Creates database `name` on the cluster of `baseURL` and returns its URL.
    package static func create(_ name: String, on baseURL: String, logger: Logger = quietLogger("fresh-database")) async throws -> String {
        _ = try await withClient(baseURL, logger: logger) { client in
            try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
        }
        return String(baseURL[..<baseURL.lastIndex(of: "/")!]) + "/" + name
    }

    /// A database name for `purpose`, unique to this run.
    package static func uniqueName(_ purpose: String) -> String {
        "test_" + TestServices.uniqueName(purpose).replacingOccurrences(of: "-", with: "_")
    }

    /// Runs `body` with a client of `url`, running for exactly as long as `body`.
    package static func withClient<T: Sendable>(
        _ url: String, logger: Logger = quietLogger("fresh-database"), _ body: @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        let client = PostgresClient(configuration: try .init(url: url), backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }
}

/// Runs `body` with a store on a PostgreSQL database of its own (named after `purpose`, created for the test and
/// migrated in process; a second migration run must apply nothing).
package func withMigratedStore(_ purpose: String, logger: Logger, _ body: (EntitlementStore, PostgresClient) async throws -> Void) async throws {
    let url = try await FreshDatabase.create(FreshDatabase.uniqueName(purpose), on: try RequiredServices.postgresURL, logger: logger)
    let client = PostgresClient(configuration: try .init(url: url), backgroundLogger: logger)
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await client.run() }
        let store = EntitlementStore(client: client, logger: logger)
        #expect(try await store.migrate() == Migrations.all.map(\.version))
        #expect(try await store.migrate() == [], "a second migration run applies nothing")
        try await body(store, client)
        group.cancelAll()
    }
}

/// The store tier's scoped resource: a database of its own, migrated in process, for each test the
/// `.migratedDatabase` trait is applied to (or each test of a suite), provided as `MigratedDatabase.current`.
package struct MigratedDatabase: Sendable {
    package let store: EntitlementStore
    package let client: PostgresClient

    @TaskLocal package static var current: MigratedDatabase?

    /// The running test's database: fails the test when it has no `.migratedDatabase` trait.
    package static var required: MigratedDatabase {
        get throws { try #require(current, "the test needs the .migratedDatabase trait") }
    }
}

package struct MigratedDatabaseTrait: PerTestResourceTrait {
    package func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let logger = quietLogger("migrated-database")
        try await withMigratedStore("migrated", logger: logger) { store, client in
            try await MigratedDatabase.$current.withValue(MigratedDatabase(store: store, client: client)) { try await function() }
        }
    }
}

extension Trait where Self == MigratedDatabaseTrait {
    /// A PostgreSQL database of its own, migrated, for the test: `MigratedDatabase.current`.
    package static var migratedDatabase: Self { MigratedDatabaseTrait() }
}
