import CustomerAPI
@testable import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestSigning
import TestSupport
import Testing
import TestGates

/// docs/customer-api.md: family-shared rows (which never carry a token) belong to the customer whose own rows share
/// their `appTransactionId`. Issue 51 saw a member's family-shared subscription missing from their read; this holds
/// the rule for a member whose own rows are a subscription and for one whose own rows are only one-time purchases.
@Suite("Customer reads: family-shared subscriptions by appTransactionId", .serialized, .requiresPostgres)
struct FamilySharingReadTests: MintedSuite {
    static let logger = quietLogger("family-tests")

    @Test("a member's family-shared subscription is listed beside their own subscription, and beside only their own one-time purchases")
    func familyShared() async throws {
        try await withMigratedStore("family", logger: Self.logger) { store, client in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            var records: [StoredNotification] = []
            var offset: Int64 = 0
            func add(_ event: NotificationMinter.SubscriptionEvent) async throws {
                offset += 1
                records.append(try await storedNotification(event, offset: offset))
            }
            // Member M1: an own subscription (token M1) and a family-shared one (no token), one app transaction.
            let m1 = deterministicUUID(9_001)
            var own = NotificationMinter.SubscriptionEvent.sample(seed: 9_004, signedDate: now - 1_000, type: "SUBSCRIBED")
            own.appAccountToken = m1
            own.appTransactionId = "705000000000000001"
            own.expiresDate = now + 86_400_000
            var shared = NotificationMinter.SubscriptionEvent.sample(seed: 9_008, signedDate: now - 500, type: "SUBSCRIBED")
            shared.appAccountToken = ""
            shared.inAppOwnershipType = "FAMILY_SHARED"
            shared.appTransactionId = own.appTransactionId
            shared.expiresDate = now + 86_400_000
            // Member M2: only an own consumable (token M2) and a family-shared subscription.
            let m2 = deterministicUUID(9_002)
            var coins = NotificationMinter.SubscriptionEvent.sample(seed: 9_012, signedDate: now - 400, type: "ONE_TIME_CHARGE")
            coins.productType = "Consumable"
            coins.productId = "com.example.coins.100"
            coins.appAccountToken = m2
            coins.appTransactionId = "705000000000000002"
            coins.includesRenewalInfo = false
            coins.includesStatus = false
            var shared2 = NotificationMinter.SubscriptionEvent.sample(seed: 9_016, signedDate: now - 300, type: "SUBSCRIBED")
            shared2.appAccountToken = ""
            shared2.inAppOwnershipType = "FAMILY_SHARED"
            shared2.appTransactionId = coins.appTransactionId
            shared2.expiresDate = now + 86_400_000
            for event in [own, shared, coins, shared2] { try await add(event) }
            let outcome = try await store.store(records)
            #expect(outcome.applied == 4, "\(outcome)")

            var rows: [String] = []
            for try await row in try await client.query(
                "SELECT original_transaction_id || ' ' || coalesce(app_account_token, '-') || ' ' || coalesce(app_transaction_id, '-') || ' ' || environment FROM entitlements",
                logger: Self.logger).decode(String.self) { rows.append(row) }
            let customers = CustomerStore(client: client, logger: Self.logger)
            let first = try await customers.customer(bundleId: minter.bundleId, customerId: m1, environment: nil).subscriptions
            #expect(Set(first.map(\.originalTransactionId)) == [own.originalTransactionId, shared.originalTransactionId], "\(first.map(\.originalTransactionId)) \(rows)")
            let secondRead = try await customers.customer(bundleId: minter.bundleId, customerId: m2, environment: nil)
            let second = secondRead.subscriptions
            #expect(second.map(\.originalTransactionId) == [shared2.originalTransactionId], "the member whose own rows are one-time purchases: \(second.map(\.originalTransactionId))")
            let purchases = secondRead.oneTimePurchases
            #expect(purchases.map(\.transactionId) == [coins.transactionId])
        }
    }
}
