import AppStoreNotifications
import TestSigning
import Testing

/// A partial (prorated) refund of a one-time purchase: the event says what Apple revoked.
@Suite("Partial refunds of one-time purchases")
struct PartialRefundEventTests: MintedSuite {

    @Test("REFUND_PRORATED of a consumable: purchase.one-time.refunded carries the revoked share; REFUND_FULL all of it")
    func prorated() async throws {
        for (type, percentage) in [("REFUND_PRORATED", Int64(25_000)), ("REFUND_FULL", Int64(100_000))] {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: 91, type: "REFUND")
            event.productType = "Consumable"
            event.productId = "com.example.coins.100"
            event.revocationDate = event.signedDate - 1_000
            event.revocationReason = 1
            event.revocationType = type
            event.revocationPercentage = percentage
            event.includesRenewalInfo = false
            event.includesStatus = false
            let verified = try await verifier.verifyNotification(minter.signedNotification(event))
            let cause = EntitlementEventCause(verified, key: event.notificationUUID)
            let emitted = try #require(EntitlementEvent.ofNotification(verified, cause: cause))
            #expect(emitted.type == .oneTimePurchaseRefunded)
            let revocation = try #require(emitted.data["revocation"]?.objectValue)
            #expect(revocation["revocationType"]?.stringValue == type && revocation["revocationPercentage"]?.int64Value == percentage, "\(revocation.serialized)")
            #expect(revocation["transactionId"]?.stringValue == event.transactionId && revocation["revocationReason"]?.int64Value == 1)
        }
    }
}
