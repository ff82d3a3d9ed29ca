@testable import Console
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestSigning
import TestSupport
import Testing
import TestGates

/// An issued offer redeemed by a purchase (docs/offers.md): the worker's transaction links the purchase to the
/// nonce and writes `offer.redeemed`; the console's timeline shows that event with the offer, the purchase and the
/// nonce, and the customer's page lists the signature as redeemed.
@Suite("Console: a redeemed offer on the timeline", .serialized, .requiresPostgres)
struct ConsoleOfferTimelineTests: MintedSuite {
    static let logger = quietLogger("console-offer-tests")

    @Test("a purchase carrying an issued promotional offer: offer.redeemed on the subscription's timeline, with the offer, the purchase and the nonce", .migratedDatabase)
    func redeemedOfferOnTimeline() async throws {
        let database = try MigratedDatabase.required
        let (store, client) = (database.store, database.client)
        let customer = UUID().uuidString.lowercased()
        var purchase = NotificationMinter.SubscriptionEvent.sample(seed: 4_242, type: "SUBSCRIBED", subtype: "RESUBSCRIBE")
        purchase.appAccountToken = customer
        purchase.offerType = 2
        purchase.offerIdentifier = "loyal_3m"
        let nonce = UUID().uuidString.lowercased()
        let issued = Date(timeIntervalSince1970: Double(purchase.purchaseDate) / 1000 - 60)
        try await client.query(
            """
            INSERT INTO offer_signatures (nonce, environment, bundle_id, customer_id, product_id, kind, offer_identifier, transaction_id, issued_at, rule)
            VALUES (\(nonce), 'Production', \(minter.bundleId), \(customer), \(purchase.productId), 'promotional-offer', 'loyal_3m', NULL, \(issued), 'loyalty')
            """,
            logger: Self.logger)

        let outcome = try await store.store([try await storedNotification(purchase, offset: 1)])
        #expect(outcome.offersRedeemed == 1, "the purchase is linked to its signature: \(outcome)")

        let console = store.console
        let page = try await console.timeline(bundleId: minter.bundleId, subscriptions: [purchase.originalTransactionId], before: nil, limit: 50)
        let events = page.rows.compactMap(\.objectValue).filter { $0["kind"] == .string("event") }
        let redeemed = try #require(events.first { $0["type"] == .string("offer.redeemed") }, "the timeline has offer.redeemed: \(events.map { $0["type"] ?? .null })")
        #expect(redeemed["offerIdentifier"] == .string("loyal_3m") && redeemed["offerNonce"] == .string(nonce))
        #expect(redeemed["offerTransaction"] == .string(purchase.transactionId))

        // As the page shows it: the offer, the purchase and the nonce on the event's row.
        let html = ConsoleTemplates.render("timeline", ["rows": page.rows.map { ConsolePages.timelineRow($0) }])
        #expect(html.contains("offer loyal_3m redeemed by \(purchase.transactionId) (nonce \(nonce))"), "\(html.prefix(2_000))")

        // The customer's page: the signature, redeemed by the purchase.
        let offers = try await console.offerSignatures(bundleId: minter.bundleId, customerId: customer)
        #expect(offers.count == 1 && offers.first?["redeemedTransactionId"] == purchase.transactionId, "\(offers)")
    }
}
