import AppStoreNotifications
import Testing

/// The ledger keys of our own records are stored (`notification_ledger`, `customer_purchases`): a version that
/// computed them differently would apply a replayed snapshot or purchase again. Pinned to values computed outside
/// Swift (Python's hashlib over the documented bytes).
@Suite("Ledger keys of pulled records and purchases never change")
struct LedgerKeyTests {
    @Test("a status snapshot: snapshot- and the first 128 bits of SHA-256 of status|transaction|renewal")
    func snapshot() {
        let document = StatusSnapshotDocument(
            environment: "Production", bundleId: "com.example.app", appAppleId: 1, subscriptionGroupIdentifier: nil, status: 1,
            originalTransactionId: "1000", signedTransactionInfo: "eyJ.tx.sig", signedRenewalInfo: "eyJ.rn.sig")
        #expect(document.notificationUUID == "snapshot-a6f0dd3f61ebd3cd610772ed6fa98220")
    }

    @Test("a purchase: purchase- and the first 128 bits of SHA-256 of its parts, each ended by a NUL")
    func purchase() {
        let document = PurchaseRecordDocument(
            bundleId: "com.example.app", claim: PurchaseClaim(customerId: "6f1c0000-0000-4000-8000-000000000001", policy: .transfer),
            signedTransaction: "eyJ.tx.sig", signedRenewalInfo: nil)
        #expect(document.purchaseKey == "purchase-8c30984c27ad39538ac186de50cf0904")
    }
}
