import EntitlementStore
import Foundation
import Logging
import PostgresNIO

extension CustomerStore {
    /// Records a purchase the API is about to produce (`pending`), unless the same purchase is already recorded
    /// (a repeated POST: its first answer stands). Returns the row as it now is.
    public func recordPendingPurchase(_ purchase: CustomerPurchaseRecord) async throws -> CustomerPurchaseRecord {
        try await client.query(
            """
            INSERT INTO customer_purchases (purchase_key, environment, bundle_id, transaction_id, original_transaction_id, customer_id, policy, status)
            VALUES (\(purchase.purchaseKey), \(purchase.environment), \(purchase.bundleId), \(purchase.transactionId), \(purchase.originalTransactionId),
                \(purchase.customerId), \(purchase.policy), 'pending')
            ON CONFLICT (purchase_key, original_transaction_id) DO NOTHING
            """,
            logger: logger)
        return try await self.purchase(key: purchase.purchaseKey) ?? purchase
    }

    /// The purchase recorded under `key`.
    public func purchase(key: String) async throws -> CustomerPurchaseRecord? {
        try await selectPurchases(
            """
            SELECT purchase_key, environment, bundle_id, transaction_id, original_transaction_id, customer_id, policy, status, decision, requested_at, applied_at
            FROM customer_purchases WHERE purchase_key = \(key)
            """
        ).first
    }

    /// The latest purchase of `transactionId` that `customerId` posted for `bundleId` (never another customer's).
    public func latestPurchase(bundleId: String, transactionId: String, customerId: String) async throws -> CustomerPurchaseRecord? {
        try await selectPurchases(
            """
            SELECT purchase_key, environment, bundle_id, transaction_id, original_transaction_id, customer_id, policy, status, decision, requested_at, applied_at
            FROM customer_purchases WHERE bundle_id = \(bundleId) AND transaction_id = \(transactionId) AND customer_id = \(customerId)
            ORDER BY requested_at DESC, purchase_key LIMIT 1
            """
        ).first
    }

    /// Purchases whose new owner Apple has not been told yet (Set App Account Token never sent, or failed), oldest
    /// first: what the customer API's background retrier sends.
    public func purchasesAwaitingAppleToken(limit: Int) async throws -> [CustomerPurchaseRecord] {
        try await selectPurchases(
            """
            SELECT DISTINCT ON (p.environment, p.bundle_id, p.original_transaction_id)
                p.purchase_key, p.environment, p.bundle_id, p.transaction_id, p.original_transaction_id, p.customer_id, p.policy, p.status, p.decision,
                p.requested_at, p.applied_at
            FROM customer_ownership o
            JOIN customer_purchases p ON p.environment = o.environment AND p.bundle_id = o.bundle_id AND p.original_transaction_id = o.original_transaction_id
                AND p.customer_id = o.customer_id AND p.status = 'accepted' AND p.decision IN ('bound', 'transferred')
            WHERE o.via IN ('bound', 'transferred') AND (o.apple_token_status IS NULL OR o.apple_token_status LIKE 'failed%')
                AND o.since < now() - interval '30 seconds'
            ORDER BY p.environment, p.bundle_id, p.original_transaction_id, p.applied_at DESC
            LIMIT \(limit)
            """
        )
    }

    private func selectPurchases(_ query: PostgresQuery) async throws -> [CustomerPurchaseRecord] {
        var records: [CustomerPurchaseRecord] = []
        let rows = try await client.query(query, logger: logger)
        for try await (key, environment, bundleId, transactionId, originalTransactionId, customerId, policy, status, decision, requestedAt, appliedAt) in rows.decode(
            (String, String, String, String, String, String, String, String, String?, Date, Date?).self)
        {
            records.append(CustomerPurchaseRecord(
                purchaseKey: key, environment: environment, bundleId: bundleId, transactionId: transactionId, originalTransactionId: originalTransactionId,
                customerId: customerId, policy: policy, status: CustomerPurchaseRecord.Status(rawValue: status) ?? .pending, decision: decision,
                requestedAt: requestedAt, appliedAt: appliedAt))
        }
        return records
    }

    /// Records what Set App Account Token answered for a purchase's new owner (`set`, `family-refused`,
    /// `failed:<code>`, `not-configured`).
    public func recordAppleTokenStatus(environment: String, bundleId: String, originalTransactionId: String, status: String) async throws {
        try await client.query(
            """
            UPDATE customer_ownership SET apple_token_status = \(status)
            WHERE environment = \(environment) AND bundle_id = \(bundleId) AND original_transaction_id = \(originalTransactionId)
            """,
            logger: logger)
    }
}

/// Who owns a subscription or one-time purchase by our table, and what Set App Account Token answered for them.
public struct CustomerOwnership: Sendable, Hashable {
    public var customerId: String
    /// `token`, `bound` or `transferred`.
    public var via: String
    public var appleTokenStatus: String?
    /// Apple's `inAppOwnershipType` of its latest transaction (`FAMILY_SHARED` is never sent to Apple).
    public var ownershipType: String?
}

extension CustomerStore {
    /// The ownership row of a subscription (or one-time purchase), nil when our table has none.
    public func ownership(environment: String, bundleId: String, originalTransactionId: String) async throws -> CustomerOwnership? {
        let rows = try await client.query(
            """
            SELECT o.customer_id, o.via, o.apple_token_status,
                coalesce((SELECT e.ownership_type FROM entitlements e
                    WHERE e.environment = o.environment AND e.bundle_id = o.bundle_id AND e.original_transaction_id = o.original_transaction_id),
                    (SELECT t.ownership_type FROM transactions t WHERE t.original_transaction_id = o.original_transaction_id
                        AND t.environment = o.environment ORDER BY t.signed_date DESC LIMIT 1))
            FROM customer_ownership o
            WHERE o.environment = \(environment) AND o.bundle_id = \(bundleId) AND o.original_transaction_id = \(originalTransactionId)
            """,
            logger: logger)
        for try await (customerId, via, status, ownershipType) in rows.decode((String, String, String?, String?).self) {
            return CustomerOwnership(customerId: customerId, via: via, appleTokenStatus: status, ownershipType: ownershipType)
        }
        return nil
    }
}
