import AppStoreOffers
import Foundation
import Logging
import PostgresNIO

/// The customer API's reads and writes for offers (docs/offers.md): a customer's history in one subscription group
/// as the decisions read it, and the signature ledger.
extension CustomerStore {
    /// The group of `productId`, from the customer's own subscriptions, else from any subscription of the product
    /// (one index-less probe that stops at the first row; a deployment with many products sends the group instead).
    public func subscriptionGroup(bundleId: String, productId: String, subscriptions: [CustomerSubscriptionRow]) async throws -> String? {
        if let group = subscriptions.first(where: { $0.productId == productId })?.subscriptionGroupId { return group }
        let rows = try await client.query(
            """
            SELECT subscription_group_id FROM entitlements
            WHERE bundle_id = \(bundleId) AND product_id = \(productId) AND subscription_group_id IS NOT NULL LIMIT 1
            """, logger: logger)
        for try await group in rows.decode(String.self) { return group }
        return nil
    }

    /// Everything the decisions read about `customerId` in `group`: their subscriptions of the group (family-shared
    /// ones included, as the customer read resolves them), every transaction of those, the billing failures
    /// seen (DID_FAIL_TO_RENEW, and a billing issue still open), and the signatures issued to them.
    public func offerHistory(
        bundleId: String, customerId: String, group: String, subscriptions all: [CustomerSubscriptionRow], environment: String
    ) async throws -> CustomerOfferHistory {
        let subscriptions = all.filter { $0.subscriptionGroupId == group && $0.environment == environment }
        let ids = subscriptions.map(\.originalTransactionId)
        var transactions: [CustomerOfferHistory.Transaction] = []
        var billingIssues = subscriptions.compactMap(\.billingIssueSince)
        if !ids.isEmpty {
            let rows = try await client.query(
                """
                SELECT transaction_id, original_transaction_id, coalesce(product_id, ''), coalesce(purchase_date, signed_date),
                       (payload->>'offerType')::integer, payload->>'offerIdentifier', ownership_type, revocation_date IS NOT NULL
                FROM transactions WHERE original_transaction_id = ANY(\(ids)) AND environment = \(environment) AND bundle_id = \(bundleId)
                """, logger: logger)
            for try await (id, original, product, purchased, offerType, offer, ownership, revoked) in rows.decode(
                (String, String, String, Date, Int?, String?, String?, Bool).self)
            {
                transactions.append(.init(
                    transactionId: id, originalTransactionId: original, productId: product, purchaseDate: purchased, offerType: offerType,
                    offerIdentifier: offer, ownershipType: ownership, revoked: revoked))
            }
            let failures = try await client.query(
                """
                SELECT signed_date FROM notifications
                WHERE original_transaction_id = ANY(\(ids)) AND environment = \(environment) AND bundle_id = \(bundleId)
                  AND notification_type = 'DID_FAIL_TO_RENEW'
                """, logger: logger)
            for try await date in failures.decode(Date.self) { billingIssues.append(date) }
        }
        var issued: [(offerIdentifier: String, at: Date)] = []
        let signatures = try await client.query(
            """
            SELECT offer_identifier, issued_at FROM offer_signatures
            WHERE bundle_id = \(bundleId) AND customer_id = \(customerId) AND environment = \(environment) AND offer_identifier IS NOT NULL
            """, logger: logger)
        for try await (offer, at) in signatures.decode((String, Date).self) { issued.append((offer, at)) }
        return CustomerOfferHistory(
            subscriptionGroupIdentifier: group, transactions: transactions,
            subscriptions: subscriptions.map {
                // A row still "active" past its period's end (no notification since) has lapsed, as `is_active` says.
                .init(originalTransactionId: $0.originalTransactionId, productId: $0.productId ?? "", status: $0.status == "active" && !$0.isActive ? "expired" : $0.status,
                      expiresAt: $0.expiresAt)
            },
            billingIssues: billingIssues, issued: issued)
    }

    /// Records a signature the API issued (the nonce ledger).
    public func recordOfferSignature(
        _ signed: OfferSignatureCreator.Signed, kind: String, environment: String, bundleId: String, customerId: String, productId: String, offerIdentifier: String?,
        transactionId: String?, rule: String
    ) async throws {
        try await client.query(
            """
            INSERT INTO offer_signatures (nonce, environment, bundle_id, customer_id, product_id, kind, offer_identifier, transaction_id, issued_at, rule)
            VALUES (\(signed.nonce), \(environment), \(bundleId), \(customerId), \(productId), \(kind), \(offerIdentifier), \(transactionId),
                    to_timestamp(\(Double(signed.issuedAt))), \(rule))
            """, logger: logger)
    }
}
