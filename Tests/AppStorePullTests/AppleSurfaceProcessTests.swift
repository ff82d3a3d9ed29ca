import AppStoreNotifications
import Foundation
import PipelineTestSupport
import TestSigning
import TestSupport
import Testing
import TestGates

/// Refund history, renewal-date extensions (one, all, their status) and app transaction info through pipelinectl
/// against the fake App Store Server API, with a worker applying what they produce.
@Suite("Apple's surface: refunds, extensions, app transactions through pipelinectl and the fake App Store Server API", .serialized, .requiresKafkaAndPostgres)
struct AppleSurfaceProcessTests: ProcessSuite {
    static let app = ["--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production"]
    static let fast = ["APPSTORE_RATE_LIMIT_STATUSES": "1000", "APPSTORE_RATE_LIMIT_TRANSACTION_HISTORY": "1000", "APPSTORE_RATE_LIMIT_CONSUMPTION": "1000"]

    func json(_ output: String) throws -> JSONObject {
        try StrictJSONParser().parseObject(Array((output.split(separator: "\n").last.map(String.init) ?? "").utf8))
    }

    @Test("refunds: every page verified and applied through the workers (a missed refund heals the row); extend one subscription with Apple's rules first and an idempotent request id; extend all with status; app transaction verified")
    func surface() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL)
        let minter = scene.fixture.minter
        // What pipelinectl verifies Apple's answers with: the test authority's root, as the workers do.
        let fast = Self.fast.merging(["TRUSTED_ROOTS": scene.fixture.rootFile, "APPS": WorkerProcessFixture.apps]) { _, new in new }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try await scene.startIngest()
        // Two current subscriptions: X (whose refund notification is "missed") and Y.
        var x = NotificationMinter.SubscriptionEvent.sample(seed: 8_101, signedDate: now - 3_600_000, type: "SUBSCRIBED", subtype: "INITIAL_BUY")
        x.originalTransactionId = "3000000000008101"
        x.transactionId = "3000000000008101"
        x.purchaseDate = now - 3_600_000
        x.expiresDate = now + 29 * 86_400_000
        var y = x
        y.originalTransactionId = "3000000000008102"
        y.transactionId = "3000000000008102"
        y.notificationUUID = UUID().uuidString.lowercased()
        for event in [x, y] { #expect(await scene.deliver(minter.signedNotification(event)) == .success) }
        #expect(try await TestDatabase.waitForLedger(scene.database, count: 2), "\(scene.fixture.logTail())")

        // Refunds: 25 refunded transactions of X's customer (two pages), the last one X's own current period.
        var refunded = x
        refunded.revocationDate = now - 60_000
        refunded.signedDate = now - 60_000  // Apple signs the refunded transaction when it refunds
        refunded.revocationReason = 1
        refunded.status = 5
        var pages: [String] = []
        for index in 0..<24 {
            var old = refunded
            old.transactionId = String(3_100_000_000_008_000 + index)
            old.originalTransactionId = String(3_000_000_000_007_000 + index)
            pages.append(minter.chain.sign(minter.transaction(old)))
        }
        pages.insert(minter.chain.sign(minter.transaction(refunded)), at: 0)
        scene.apple.fake.setRefunds(pages, for: [x.originalTransactionId])
        scene.apple.fake.setSubscription(FakeAppStoreServerAPI.Subscription(
            originalTransactionId: x.originalTransactionId, subscriptionGroupIdentifier: "21000001", status: 5,
            signedTransactionInfo: minter.chain.sign(minter.transaction(refunded)), signedRenewalInfo: minter.chain.sign(minter.renewalInfo(refunded)), history: []))
        scene.apple.fake.setSubscription(FakeAppStoreServerAPI.Subscription(
            originalTransactionId: y.originalTransactionId, subscriptionGroupIdentifier: "21000001", status: 1,
            signedTransactionInfo: minter.chain.sign(minter.transaction(y)), signedRenewalInfo: minter.chain.sign(minter.renewalInfo(y)), history: []))
        let refunds = try await scene.run(["refunds"] + Self.app + ["--original-transaction-id", x.originalTransactionId, "--wait", "30s", "--json"], extra: fast)
        #expect(refunds.status == 0, "\(refunds.output)\n\(scene.fixture.logTail())")
        let refundAnswer = try json(refunds.output)
        #expect(refundAnswer["refunds"]?.arrayValue?.count == 25 && refundAnswer["pages"]?.int64Value == 2, "\(refunds.output)")
        #expect(refundAnswer["notApplied"]?.int64Value == 0)
        let lookups = scene.apple.fake.requests.filter { $0.path.hasPrefix("/inApps/v2/refund/lookup/") }
        #expect(lookups.count == 2 && lookups.allSatisfy { $0.status == 200 && $0.refusal == nil }, "every page asked with a valid JWT")
        #expect(try await scene.fixture.waitForLag(group: scene.group))
        #expect(try await scene.query("SELECT status FROM entitlements WHERE original_transaction_id = '\(x.originalTransactionId)'", as: String.self) == ["refunded"])
        #expect(try await scene.query("SELECT count(*)::int FROM transactions WHERE revocation_date IS NOT NULL", as: Int.self).first == 25)

        // Extend one subscription: refused locally where Apple would refuse (nothing sent), else sent once per request id.
        let before = scene.apple.fake.extensionRequests.count
        let expired = try await scene.run(["extend"] + Self.app + ["--original-transaction-id", x.originalTransactionId, "--days", "7", "--reason-code", "3"], extra: fast)
        #expect(expired.status != 0 && expired.output.contains("4030004"), "\(expired.output)")
        let tooLong = try await scene.run(["extend"] + Self.app + ["--original-transaction-id", y.originalTransactionId, "--days", "91", "--reason-code", "3"], extra: fast)
        #expect(tooLong.status != 0 && tooLong.output.contains("1 to 90"), "\(tooLong.output)")
        #expect(scene.apple.fake.extensionRequests.count == before, "nothing sent to Apple for a refused extension")
        // A request recorded but never answered (the tool died): the next run sends the same identifier.
        _ = try await scene.query(
            """
            INSERT INTO renewal_extensions (request_identifier, bundle_id, environment, original_transaction_id, extend_by_days, reason_code)
            VALUES ('11111111-2222-4333-8444-555555555555', '\(FakeAppleFixture.bundleId)', 'Production', '\(y.originalTransactionId)', 7, 3) RETURNING request_identifier
            """, as: String.self)
        let extended = try await scene.run(["extend"] + Self.app + ["--original-transaction-id", y.originalTransactionId, "--days", "7", "--reason-code", "3", "--json"], extra: fast)
        #expect(extended.status == 0, "\(extended.output)")
        let sent = try #require(scene.apple.fake.extensionRequests.last)
        #expect(sent.path == "/inApps/v1/subscriptions/extend/\(y.originalTransactionId)")
        #expect(sent.body["extendByDays"]?.int64Value == 7 && sent.body["extendReasonCode"]?.int64Value == 3)
        #expect(sent.body["requestIdentifier"]?.stringValue == "11111111-2222-4333-8444-555555555555", "the unfinished request's identifier is sent again")
        #expect(try json(extended.output)["success"] == .bool(true))
        #expect(try await scene.query("SELECT outcome FROM renewal_extensions WHERE request_identifier = '11111111-2222-4333-8444-555555555555'", as: String.self) == ["succeeded"])
        let again = try await scene.run(["extend"] + Self.app + ["--original-transaction-id", y.originalTransactionId, "--days", "5", "--reason-code", "1", "--json"], extra: fast)
        #expect(again.status == 0, "\(again.output)")
        let third = try await scene.run(["extend"] + Self.app + ["--original-transaction-id", y.originalTransactionId, "--days", "5", "--reason-code", "1"], extra: fast)
        #expect(third.status != 0 && third.output.contains("4030005"), "a third extension in 365 days is refused: \(third.output)")
        // Apple's own refusal, with its code.
        var z = y
        z.originalTransactionId = "3000000000008103"
        z.transactionId = z.originalTransactionId
        z.notificationUUID = UUID().uuidString.lowercased()
        #expect(await scene.deliver(minter.signedNotification(z)) == .success)
        #expect(try await TestDatabase.waitForLedger(scene.database, count: 2 + 25 + 1 + 1), "x and y, 25 refunded transactions and X's snapshot, z")
        scene.apple.fake.refuseExtension(of: z.originalTransactionId, code: 4_030_004, message: "Subscription extension ineligible.")
        let refused = try await scene.run(["extend"] + Self.app + ["--original-transaction-id", z.originalTransactionId, "--days", "3", "--reason-code", "2"], extra: fast)
        #expect(refused.status != 0 && refused.output.contains("4030004") && refused.output.contains("SubscriptionExtensionIneligibleError"), "\(refused.output)")

        // Extend every active subscriber of a product, then its status.
        let mass = try await scene.run(
            ["extend"] + Self.app + ["--all", "--product-id", x.productId, "--days", "10", "--reason-code", "3", "--storefront", "USA", "--storefront", "FRA", "--json"],
            extra: fast)
        #expect(mass.status == 0, "\(mass.output)")
        let requestId = try #require(try json(mass.output)["requestIdentifier"]?.stringValue)
        let massBody = try #require(scene.apple.fake.extensionRequests.last)
        #expect(massBody.path == "/inApps/v1/subscriptions/extend/mass" && massBody.body["productId"]?.stringValue == x.productId)
        #expect(massBody.body["storefrontCountryCodes"] == .array([.string("USA"), .string("FRA")]))
        let pending = try await scene.run(["extend", "status"] + Self.app + ["--product-id", x.productId, "--request-id", requestId, "--json"], extra: fast)
        let pendingStatus = try json(pending.output)
        #expect(pending.status == 0 && pendingStatus["complete"] == .bool(false) && pendingStatus["summaryNotificationReceived"] == .bool(false), "\(pending.output)")
        // Apple's RENEWAL_EXTENDED for one subscriber (expiry moved), a FAILURE for another, and the SUMMARY at the end.
        var renewalExtended = y
        renewalExtended.notificationType = "RENEWAL_EXTENDED"
        renewalExtended.subtype = nil
        renewalExtended.notificationUUID = UUID().uuidString.lowercased()
        renewalExtended.signedDate = now + 1_000
        renewalExtended.expiresDate = y.expiresDate + 10 * 86_400_000
        var failure = z
        failure.notificationType = "RENEWAL_EXTENSION"
        failure.subtype = "FAILURE"
        failure.notificationUUID = UUID().uuidString.lowercased()
        failure.signedDate = now + 1_000
        let summary = minter.signedRenewalExtensionSummary(
            notificationUUID: UUID().uuidString.lowercased(), signedDate: now + 2_000, requestIdentifier: requestId, productId: x.productId, storefronts: ["USA", "FRA"],
            succeeded: 41, failed: 2)
        for signed in [minter.signedNotification(renewalExtended), minter.signedNotification(failure), summary] {
            #expect(await scene.deliver(signed) == .success)
        }
        #expect(try await TestDatabase.waitForLedger(scene.database, count: 2 + 25 + 1 + 1 + 3), "\(scene.fixture.logTail())")
        #expect(try await scene.fixture.waitForLag(group: scene.group))
        let moved = try await scene.query(
            "SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM entitlements WHERE original_transaction_id = '\(y.originalTransactionId)'", as: Int64.self)
        #expect(moved == [renewalExtended.expiresDate], "RENEWAL_EXTENDED moved the expiry")
        #expect(try await scene.query("SELECT count(*)::int FROM notification_archive WHERE notification_type = 'RENEWAL_EXTENSION'", as: Int.self).first == 2)
        scene.apple.fake.completeMassExtension(requestId, succeeded: 41, failed: 2, at: now)
        let done = try await scene.run(["extend", "status"] + Self.app + ["--product-id", x.productId, "--request-id", requestId, "--json"], extra: fast)
        let status = try json(done.output)
        #expect(status["complete"] == .bool(true) && status["succeededCount"]?.int64Value == 41 && status["failedCount"]?.int64Value == 2, "\(done.output)")
        #expect(status["summaryNotificationReceived"] == .bool(true), "Apple's SUMMARY completed the request's row")
        #expect(try await scene.query("SELECT succeeded_count::int FROM renewal_extensions WHERE request_identifier = '\(requestId)'", as: Int.self) == [41])

        // App transaction: verified; one signed by another authority is refused.
        scene.apple.fake.setAppTransaction(minter.signedAppTransaction(appTransactionId: "704100008102", signedDate: now - 1_000), for: [y.transactionId])
        // Without --bundle-id and --environment: the one app of APPS, in Production.
        let app = try await scene.run(["app-transaction", "--transaction-id", y.transactionId, "--json"], extra: fast)
        let appAnswer = try json(app.output)
        #expect(app.status == 0 && appAnswer["appTransactionId"]?.stringValue == "704100008102", "\(app.output)")
        let forger = NotificationMinter(chain: try TestCertificateAuthority().issueChain())
        scene.apple.fake.setAppTransaction(forger.signedAppTransaction(appTransactionId: "704100008103", signedDate: now - 1_000), for: [z.transactionId])
        let forged = try await scene.run(["app-transaction"] + Self.app + ["--transaction-id", z.transactionId], extra: fast)
        #expect(forged.status != 0 && forged.output.contains("does not verify"), "\(forged.output)")
        await scene.finish()
    }
}
