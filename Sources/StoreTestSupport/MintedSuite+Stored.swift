import AppStoreNotifications
import EntitlementStore
import TestSigning

extension MintedSuite {
    /// `event` minted, verified and made the record a worker would store, read at `offset` of topic `t`.
    package func storedNotification(_ event: NotificationMinter.SubscriptionEvent, offset: Int64) async throws -> StoredNotification {
        let signed = minter.signedNotification(event)
        return StoredNotification(
            verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: offset,
            receivedAt: Timestamp(millisecondsSince1970: event.signedDate))
    }

    /// The erasure key of the erasure suites (a test secret, not a deployment's).
    package var erasureKey: ErasureKey { try! ErasureKey(secret: String(repeating: "k", count: 40) + "erasure-test-key") }
}
