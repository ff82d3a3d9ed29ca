import AppStoreNotifications
@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import PipelineTestSupport
import StoreTestSupport
import TestSigning
import TestSupport
import Testing
import TestGates

/// The erasure promises that did not hold (issue 51), each reproduced against the code before its fix: a customer
/// erased with nothing stored comes back as a notification's `appAccountToken`; a second key is accepted silently;
/// request ids are one namespace for every app; a record about an erased customer is screened before it is produced.
@Suite("Erasure hardening against a real PostgreSQL", .serialized, .requiresPostgres)
struct ErasureHardeningTests: MintedSuite {
    static let logger = quietLogger("erasure-hardening-tests")
    let otherKey = try! ErasureKey(secret: String(repeating: "o", count: 40) + "another-erasure-key")

    func count(_ sql: String, _ client: PostgresClient) async throws -> Int {
        var total = 0
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: Self.logger).decode(Int64.self) { total = Int(value) }
        return total
    }

    @Test("erasing customer U with nothing stored suppresses a notification signed before the erasure that carries U as appAccountToken")
    func customerIdIsAlsoAToken() async throws {
        try await withMigratedStore("erasure-uuid", logger: Self.logger) { _, client in
            let store = EntitlementStore(client: client, logger: Self.logger, erasureKey: erasureKey)
            let customer = deterministicUUID(5_151)
            var event = NotificationMinter.SubscriptionEvent.sample(seed: 5_151, signedDate: Int64(Date().timeIntervalSince1970 * 1000) - 60_000, type: "SUBSCRIBED")
            event.appAccountToken = customer
            let report = try await ErasureStore(client: client, logger: Self.logger).erase(
                ErasureRequest(subject: ErasureSubject(.customerId, customer.uppercased(), bundleId: minter.bundleId), reason: "t", requestedBy: "test"), key: erasureKey)
            #expect(report.counts["identifiers"] == 2, "the id as a customer id and as a token: \(report.counts)")
            let outcome = try await store.store([try await storedNotification(event, offset: 1)])
            #expect(outcome.applied == 0 && outcome.suppressed.values.reduce(0, +) == 1, "\(outcome)")
            #expect(try await count("SELECT count(*) FROM entitlements", client) == 0)
            #expect(try await DatabaseScan.mentions(of: [customer, event.originalTransactionId], in: client).isEmpty)
        }
    }

    @Test("an eraser holding another key is refused, naming both fingerprints; nothing is written")
    func secondKeyRefused() async throws {
        try await withMigratedStore("erasure-second-key", logger: Self.logger) { _, client in
            let erasures = ErasureStore(client: client, logger: Self.logger)
            _ = try await erasures.erase(
                ErasureRequest(subject: ErasureSubject(.originalTransactionId, "1000000000000001", bundleId: minter.bundleId), reason: "t", requestedBy: "test"), key: erasureKey)
            let suppressions = try await count("SELECT count(*) FROM erasure_suppressions", client)
            await #expect {
                _ = try await erasures.erase(
                    ErasureRequest(subject: ErasureSubject(.originalTransactionId, "1000000000000002", bundleId: minter.bundleId), reason: "t", requestedBy: "test"),
                    key: otherKey)
            } throws: { error in
                guard case ErasureFailure.keyMismatch(let ours, let theirs) = error else { return false }
                let text = (error as! ErasureFailure).description
                return ours == otherKey.id && theirs == [erasureKey.id] && text.contains(erasureKey.id) && text.contains(otherKey.id)
            }
            #expect(try await count("SELECT count(*) FROM erasure_keys", client) == 1)
            #expect(try await count("SELECT count(*) FROM erasure_suppressions", client) == suppressions)
            #expect(try await count("SELECT count(*) FROM erasure_requests", client) == 1)
        }
    }

    @Test("erasure request ids are scoped by app: another app's id is neither taken nor seen")
    func requestIdsPerApp() async throws {
        try await withMigratedStore("erasure-ids", logger: Self.logger) { _, client in
            let erasures = ErasureStore(client: client, logger: Self.logger)
            _ = try await erasures.erase(
                ErasureRequest(requestId: "ticket-7", subject: ErasureSubject(.originalTransactionId, "1000000000000001", bundleId: "com.example.a"), reason: "t", requestedBy: "test"),
                key: erasureKey)
            let other = try await erasures.erase(
                ErasureRequest(requestId: "ticket-7", subject: ErasureSubject(.originalTransactionId, "2000000000000001", bundleId: "com.example.b"), reason: "t", requestedBy: "test"),
                key: erasureKey)
            #expect(other.bundleId == "com.example.b" && other.status == "completed")
            #expect(try await erasures.report(requestId: "ticket-7", bundleId: "com.example.a")?.bundleId == "com.example.a")
            #expect(try await erasures.report(requestId: "ticket-7", bundleId: "com.example.c") == nil)
            await #expect(throws: ErasureFailure.requestIdTaken("ticket-7")) {
                _ = try await erasures.erase(
                    ErasureRequest(requestId: "ticket-7", subject: ErasureSubject(.originalTransactionId, "3", bundleId: "com.example.a"), reason: "t", requestedBy: "test"),
                    key: erasureKey)
            }
        }
    }

    @Test("the erasure screen: pulled and re-driven records of an erased customer from before the erasure are held back; later ones and others pass")
    func screen() async throws {
        try await withMigratedStore("erasure-screen", logger: Self.logger) { _, client in
            let store = EntitlementStore(client: client, logger: Self.logger, erasureKey: erasureKey)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            var erasedEvent = NotificationMinter.SubscriptionEvent.sample(seed: 7_001, signedDate: now - 86_400_000)
            erasedEvent.purchaseDate = now - 2 * 86_400_000
            var laterEvent = erasedEvent
            laterEvent.signedDate = now + 60_000
            laterEvent.purchaseDate = now + 60_000
            laterEvent.transactionId = "9900000000000001"
            let otherEvent = NotificationMinter.SubscriptionEvent.sample(seed: 7_020, signedDate: now - 86_400_000)
            #expect(try await store.erased([ErasureClaim.ofNotification(minter.signedNotification(erasedEvent))]).isEmpty, "nothing erased yet")
            _ = try await ErasureStore(client: client, logger: Self.logger).erase(
                ErasureRequest(subject: ErasureSubject(.originalTransactionId, erasedEvent.originalTransactionId, bundleId: minter.bundleId), reason: "t", requestedBy: "test"),
                key: erasureKey)
            let history = Array(minter.chain.sign(minter.transaction(erasedEvent)).utf8)
            let laterHistory = Array(minter.chain.sign(minter.transaction(laterEvent)).utf8)
            let claims: [ErasureClaim?] = [
                ErasureClaim.ofNotification(minter.signedNotification(erasedEvent)),
                ErasureClaim.of(record: history, kind: .historyTransaction),
                ErasureClaim.ofNotification(minter.signedNotification(laterEvent)),
                ErasureClaim.of(record: laterHistory, kind: .historyTransaction),
                ErasureClaim.ofNotification(minter.signedNotification(otherEvent)),
                nil,
            ]
            let held = try await store.erased(claims)
            #expect(held == [0, 1], "\(held) \(claims.map { $0.map { "\($0.time.map { $0.timeIntervalSince1970 } ?? 0) \($0.identifiers.map(\.value))" } ?? "nil" })")
            // A dead letter claiming the erased customer is held back whatever date it claims (it proved none).
            var letter = DeadLetteredRecord(position: RecordPosition(topic: "t", partition: 0, offset: 9), errorCode: "signatureMismatch",
                                            payload: Array(minter.signedNotification(laterEvent).utf8))
            letter.claims.bundleId = minter.bundleId
            #expect(try await store.erasedClaims([letter]) == [letter.position])
            // Without the key, the screen refuses rather than passing an erased customer through.
            let keyless = EntitlementStore(client: client, logger: Self.logger)
            await #expect(throws: ErasureFailure.keyMissing) { _ = try await keyless.erased(claims) }
        }
    }
}
