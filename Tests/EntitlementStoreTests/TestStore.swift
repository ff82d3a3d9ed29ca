import EntitlementStore
import Logging
import PostgresNIO
import TestSupport
import PipelineTestSupport
import Testing

/// Runs `body` with a store on a PostgreSQL database of its own (named after `purpose`, created for the test and
/// migrated; a second migration run must apply nothing).
func withMigratedStore(_ purpose: String, logger: Logger, _ body: (EntitlementStore, PostgresClient) async throws -> Void) async throws {
    let url = try RequiredServices.postgresURL
    let database = "test_" + TestServices.uniqueName(purpose).replacingOccurrences(of: "-", with: "_")
    let admin = PostgresClient(configuration: try .init(url: url), backgroundLogger: logger)
    var configuration = try PostgresClient.Configuration(url: url)
    configuration.database = database
    let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await admin.run() }
        group.addTask { await client.run() }
        try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: logger)
        let store = EntitlementStore(client: client, logger: logger)
        #expect(try await store.migrate() == Migrations.all.map(\.version))
        #expect(try await store.migrate() == [], "a second migration run applies nothing")
        try await body(store, client)
        group.cancelAll()
    }
}
