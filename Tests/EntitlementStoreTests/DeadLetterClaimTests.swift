@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import Synchronization
import Testing
import TestGates
import TestSupport

/// Dead letters published once across a partition's owners: a worker rebalanced out of a partition may still be
/// writing a batch its next owner already reads. Two real transactions on the same positions, the first one's
/// "publish" held open until the second is waiting.
@Suite("Dead-letter claims against a real PostgreSQL", .serialized, .requiresPostgres)
struct DeadLetterClaimTests {
    static let logger = quietLogger("dead-letter-claim-tests")

    @Test("two owners of a partition reading one forged record: the second waits for the first's claim and publishes nothing; a committed batch's row counts too")
    func oneDeadLetterAcrossOwners() async throws {
        try await withMigratedStore("dlclaim", logger: Self.logger) { store, client in
            let forged = RecordPosition(topic: "notifications", partition: 3, offset: 41)
            let other = RecordPosition(topic: "notifications", partition: 1, offset: 7)
            let letterPlace = RecordPosition(topic: "notifications.dead-letter", partition: 0, offset: 12)
            let firstPublishing = Mutex(false)
            let published = Mutex<[String]>([])

            async let first: (alreadySent: [RecordPosition: RecordPosition?], published: Int) = store.withDeadLetterClaim([forged]) { alreadySent in
                #expect(alreadySent.isEmpty)
                firstPublishing.withLock { $0 = true }
                try await Task.sleep(for: .milliseconds(1_500))  // the broker's acknowledgement, slow
                published.withLock { $0.append("first") }
                return (1, claims: [forged: letterPlace])
            }
            while !firstPublishing.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
            let second = try await store.withDeadLetterClaim([forged, other]) { alreadySent in
                let toSend = [forged, other].filter { alreadySent[$0] == nil }
                published.withLock { $0.append(contentsOf: toSend.map { "second \($0.description)" }) }
                return (toSend.count, claims: Dictionary(uniqueKeysWithValues: toSend.map { ($0, RecordPosition(topic: letterPlace.topic, partition: 0, offset: 13)) }))
            }
            let firstResult = try await first
            #expect(firstResult.published == 1)
            #expect(published.withLock { $0 } == ["first", "second \(other.description)"], "the second owner published only what the first had not")
            #expect(second.alreadySent[forged] == .some(letterPlace), "the claim says where the first owner's letter landed")
            #expect(second.published == 1)

            // A committed batch's row (no claim) is already sent too.
            let recorded = RecordPosition(topic: "notifications", partition: 2, offset: 99)
            _ = try await store.store([], deadLettered: [DeadLetteredRecord(position: recorded, errorCode: "signatureMismatch")])
            let third = try await store.withDeadLetterClaim([recorded]) { alreadySent in (alreadySent.count, claims: [:]) }
            #expect(third.published == 1 && third.alreadySent[recorded] == .some(nil))

            // A publish that fails leaves no claim: the next try publishes.
            let failed = RecordPosition(topic: "notifications", partition: 0, offset: 5)
            await #expect(throws: (any Error).self) {
                _ = try await store.withDeadLetterClaim([failed]) { _ -> (Int, claims: [RecordPosition: RecordPosition]) in throw CancellationError() }
            }
            let retried = try await store.withDeadLetterClaim([failed]) { alreadySent in (alreadySent.count, claims: [:]) }
            #expect(retried.published == 0, "nothing claimed by a transaction that rolled back")
            var claims = 0
            for try await count in try await client.query("SELECT count(*) FROM dead_letter_claims", logger: Self.logger).decode(Int64.self) { claims = Int(count) }
            #expect(claims == 2)
        }
    }
}
