import AppStoreNotifications
import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@Suite("Entitlement store against a real PostgreSQL", .serialized, .enabled(if: TestServices.runPostgresSuites, Comment(rawValue: TestServices.missingPostgres)))
struct EntitlementStoreTests {
    static let logger: Logger = {
        var logger = Logger(label: "store-tests")
        logger.logLevel = .error
        return logger
    }()
    static let day: Int64 = 24 * 3600 * 1000
    static let start = TestDates.milliseconds("2026-03-01T00:00:00Z")

    /// Runs `body` with a store on a database of its own (created for the test, migrated).
    func withStore(_ body: (EntitlementStore, PostgresClient) async throws -> Void) async throws {
        let url = try #require(TestServices.postgresURL, Comment(rawValue: TestServices.missingPostgres))
        let database = "test_" + TestServices.uniqueName("store").replacingOccurrences(of: "-", with: "_")
        let admin = PostgresClient(configuration: try .init(url: url), backgroundLogger: Self.logger)
        let base = try PostgresClient.Configuration(url: url)
        var configuration = base
        configuration.database = database
        let client = PostgresClient(configuration: configuration, backgroundLogger: Self.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await admin.run() }
            group.addTask { await client.run() }
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: Self.logger)
            let store = EntitlementStore(client: client, logger: Self.logger)
            #expect(try await store.migrate() == Migrations.all.map(\.version))
            #expect(try await store.migrate() == [], "a second migration run applies nothing")
            try await body(store, client)
            group.cancelAll()
        }
    }

    let authority: TestCertificateAuthority
    let minter: NotificationMinter
    let verifier: SignedPayloadVerifier

    init() throws {
        authority = try TestCertificateAuthority()
        minter = NotificationMinter(chain: try authority.issueChain())
        verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
    }

    func notification(_ type: String, _ subtype: String? = nil, day: Int64, status: Int32 = 1) async throws -> StoredNotification {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 7 * 4, signedDate: Self.start + day * Self.day, type: type, subtype: subtype)
        event.notificationUUID = deterministicUUID(Int(day) * 1_000 + type.count)
        event.transactionId = String(3_000_000 + day)
        event.expiresDate = Self.start + (day + 30) * Self.day
        event.status = status
        if status == 2 { event.autoRenewStatus = 0 }
        let signed = minter.signedNotification(event)
        return StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: day)
    }

    func entitlementRow(_ client: PostgresClient) async throws -> (status: String, lastType: String, active: Bool)? {
        let rows = try await client.query("SELECT status, last_notification_type, is_active FROM entitlements_now", logger: Self.logger)
        var result: (String, String, Bool)?
        for try await row in rows.decode((String, String, Bool).self) { result = row }
        return result
    }

    func count(_ table: String, _ client: PostgresClient) async throws -> Int {
        var value = 0
        for try await count in try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*)::int FROM \(table)"), logger: Self.logger).decode(Int.self) {
            value = count
        }
        return value
    }

    @Test("a lifecycle in one batch: archived, deduplicated, entitlement follows")
    func lifecycle() async throws {
        let subscribed = try await notification("SUBSCRIBED", "INITIAL_BUY", day: 0)
        let renewed = try await notification("DID_RENEW", day: 30)
        let expired = try await notification("EXPIRED", "VOLUNTARY", day: 60, status: 2)
        try await withStore { store, client in
            let outcome = try await store.store([subscribed, renewed, renewed, expired])
            #expect(outcome == BatchOutcome(applied: 3, duplicates: 1, entitlementsUpdated: 3, stale: 0))
            let row = try await entitlementRow(client)
            #expect(row?.status == "expired" && row?.lastType == "EXPIRED" && row?.active == false)
            #expect(try await count("notifications", client) == 3)
            #expect(try await count("transactions", client) == 3)
            // Redelivery of the whole batch (a replay) changes nothing.
            #expect(try await store.store([subscribed, renewed, expired]) == BatchOutcome(applied: 0, duplicates: 3, entitlementsUpdated: 0, stale: 0))
            #expect(try await count("notifications", client) == 3)
        }
    }

    @Test("out of order: an older renewal after a newer expiry leaves the expiry")
    func outOfOrder() async throws {
        let renewed = try await notification("DID_RENEW", day: 30)
        let expired = try await notification("EXPIRED", "VOLUNTARY", day: 60, status: 2)
        try await withStore { store, client in
            #expect(try await store.store([expired]).entitlementsUpdated == 1)
            let late = try await store.store([renewed])
            #expect(late.applied == 1 && late.stale == 1 && late.entitlementsUpdated == 0, "archived, but state kept")
            #expect(try await entitlementRow(client)?.status == "expired")
            #expect(try await count("notifications", client) == 2)
        }
    }

    @Test("an active subscription reads as active until its expiry")
    func active() async throws {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 99, signedDate: Int64(Date().timeIntervalSince1970 * 1000), type: "SUBSCRIBED", subtype: "INITIAL_BUY")
        event.expiresDate = event.signedDate + 30 * Self.day
        let signed = minter.signedNotification(event)
        let record = StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed)
        try await withStore { store, client in
            _ = try await store.store([record])
            let row = try await entitlementRow(client)
            #expect(row?.status == "active" && row?.active == true)
        }
    }
}
