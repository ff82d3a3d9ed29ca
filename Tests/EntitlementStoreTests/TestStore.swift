import AppStoreNotifications
import EntitlementStore
import TestSigning
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

extension MintedSuite {
    /// `event` minted, verified and made the record a worker would store, read at `offset` of topic `t`.
    func storedNotification(_ event: NotificationMinter.SubscriptionEvent, offset: Int64) async throws -> StoredNotification {
        let signed = minter.signedNotification(event)
        return StoredNotification(
            verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: offset,
            receivedAt: Timestamp(millisecondsSince1970: event.signedDate))
    }

    /// A quiet logger for a suite of store tests.
    static func quietLogger(_ label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = .error
        return logger
    }
}
