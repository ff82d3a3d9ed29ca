import AppStoreNotifications
import TestSigning
import Testing

/// Our own record kinds carry a `notificationType` of ours (PURCHASE, STATUS_SNAPSHOT, TRANSACTION_HISTORY): they are
/// not Apple's unknown values, so they neither log a notice nor count in `worker_unknown_values`.
@Suite("Pipeline record types are not Apple's unknown values")
struct PipelineRecordTypeTests: MintedSuite {

    @Test("A purchase posted to the customer API reports no unknown notificationType; an unknown Apple type still does")
    func purchaseIsKnown() async throws {
        let event = NotificationMinter.SubscriptionEvent.sample(seed: 17, type: "SUBSCRIBED")
        let document = PurchaseRecordDocument(
            bundleId: minter.bundleId, claim: PurchaseClaim(customerId: "customer-1", policy: .transfer),
            signedTransaction: minter.chain.sign(minter.transaction(event)), signedRenewalInfo: nil)
        let purchase = try await verifier.verifyPurchase(document)
        #expect(purchase.payload.rawNotificationType == "PURCHASE")
        #expect(purchase.isPipelineRecord)
        #expect(purchase.unknownValues.isEmpty, "\(purchase.unknownValues)")

        let unknown = try await verifier.verifyNotification(minter.signedNotification(.sample(seed: 18, type: "SOMETHING_NEW_FROM_APPLE")))
        #expect(!unknown.isPipelineRecord)
        #expect(unknown.unknownValues.map(\.field) == ["notificationType"])
    }
}
