import AppStoreNotifications
import Foundation
import Testing

/// The 48 genuine Apple-signed payloads of ../shared/vectors/apple-real, with the embedded Apple root:
/// all must verify, including the three whose leaf certificates have expired since (validity at signedDate).
@Suite("Real Apple payloads")
struct AppleRealVectorTests {
    static let vectors: [VectorFile] = {
        guard Fixtures.vectorsPresent else { return [] }
        return VectorFile.all(in: Fixtures.vectorsDirectory.appendingPathComponent("apple-real"))
    }()

    @Test("there are 48, three of them signed by leaves that expired since")
    func count() throws {
        try Fixtures.requireVectors()
        #expect(Self.vectors.count == 48)
    }

    @Test("verifies with Apple Root CA - G3 at signedDate", arguments: vectors)
    func verifies(_ vector: VectorFile) async throws {
        let object = vector.object
        let bundleId = object["bundleId"]?.stringValue
        let appAppleId = object["appAppleId"]?.stringValue.flatMap { Int64($0) } ?? object["appAppleId"]?.int64Value
        let verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: bundleId, appAppleId: appAppleId, environments: [.sandbox])]))
        let kind = try #require(object["kind"]?.stringValue)
        let decoded = try #require(object["decoded"])
        switch kind {
        case "notification":
            let signedPayload = try #require(object["signedPayload"]?.stringValue)
            let notification = try await verifier.verifyNotification(signedPayload)
            #expect(sameJSON(.object(notification.json), decoded))
            // The worker's routing key (verified) is ingest's Kafka key (unverified) on Apple's own payloads.
            #expect(notification.routingKey != nil && notification.routingKey == UnverifiedPeek.partitionKey(ofNotification: signedPayload))
            #expect(notification.environment == .sandbox)
            if let nested = object["decoded_nested"]?.objectValue, let transaction = nested["signedTransactionInfo"] {
                #expect(sameJSON(.object(try #require(notification.transactionInfo).json), transaction))
            }
        case "transaction":
            let transaction = try await verifier.verifyTransaction(try #require(object["signedTransaction"]?.stringValue))
            #expect(sameJSON(.object(transaction.json), decoded))
        case "renewalInfo":
            let renewal = try await verifier.verifyRenewalInfo(try #require(object["signedRenewalInfo"]?.stringValue))
            #expect(sameJSON(.object(renewal.json), decoded))
        default:
            Issue.record("unknown kind \(kind)")
        }
    }

    @Test("the same payloads fail against a root that is not Apple's")
    func failsWithOtherRoot() async throws {
        guard let vector = Self.vectors.first(where: { $0.object["kind"] == .string("transaction") }) else { return }
        let otherRoot = try Fixtures.bytes(Fixtures.vectorsDirectory.appendingPathComponent("generated/test-root-ca.der"))
        let verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: nil, appAppleId: nil)], trustedRoots: [otherRoot]))
        await #expect(throws: VerificationError.self) {
            try await verifier.verifyTransaction(try #require(vector.object["signedTransaction"]?.stringValue))
        }
    }
}
