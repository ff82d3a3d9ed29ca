import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

/// A purchase posted through the customer API, as the API and the worker record it.
public struct CustomerPurchaseRecord: Sendable, Hashable {
    public enum Status: String, Sendable, Hashable {
        /// Produced to the topic, not yet applied by a worker.
        case pending
        /// Applied: the purchase belongs to the customer who posted it.
        case accepted
        /// Applied: another customer owns it and the ownership policy kept it there.
        case conflict
    }

    public var purchaseKey: String
    public var environment: String
    public var bundleId: String
    public var transactionId: String
    public var originalTransactionId: String
    public var customerId: String
    public var policy: String
    public var status: Status
    /// `OwnershipDecision`'s raw value once applied.
    public var decision: String?
    public var requestedAt: Date
    public var appliedAt: Date?

    public init(
        purchaseKey: String, environment: String, bundleId: String, transactionId: String, originalTransactionId: String, customerId: String,
        policy: String, status: Status, decision: String? = nil, requestedAt: Date = Date(), appliedAt: Date? = nil
    ) {
        self.purchaseKey = purchaseKey
        self.environment = environment
        self.bundleId = bundleId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.customerId = customerId
        self.policy = policy
        self.status = status
        self.decision = decision
        self.requestedAt = requestedAt
        self.appliedAt = appliedAt
    }
}

/// What the worker did with one purchase's claim.
struct AppliedClaim {
    var decision: OwnershipDecision
    /// The owner before, when the decision moved the purchase (nil: it had none).
    var previousOwner: String?
}

extension EntitlementStore {
    /// Records a purchase the API is about to produce (`pending`), unless the same purchase is already recorded
    /// (a repeated POST: its first answer stands). Returns the row as it now is.
    public func recordPendingPurchase(_ purchase: CustomerPurchaseRecord) async throws -> CustomerPurchaseRecord {
        try await client.query(
            """
            INSERT INTO customer_purchases (purchase_key, environment, bundle_id, transaction_id, original_transaction_id, customer_id, policy, status)
            VALUES (\(purchase.purchaseKey), \(purchase.environment), \(purchase.bundleId), \(purchase.transactionId), \(purchase.originalTransactionId),
                \(purchase.customerId), \(purchase.policy), 'pending')
            ON CONFLICT (purchase_key) DO NOTHING
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

    /// Decides and records the ownership a purchase claims, in the batch transaction: the owner is our table's,
    /// else Apple's token (the transaction's, else the row's); `OwnershipDecision.decide` under the claim's
    /// policy; a move or a first binding is a `customer_transfers` row.
    func applyClaim(
        _ claim: PurchaseClaim, purchaseKey: String, transaction: JWSTransactionDecodedPayload, key: EntitlementKey, rowToken: String?,
        on connection: PostgresConnection
    ) async throws -> AppliedClaim {
        var recorded: String?
        let rows = try await connection.query(
            """
            SELECT customer_id FROM customer_ownership
            WHERE environment = \(key.environment) AND bundle_id = \(key.bundleId) AND original_transaction_id = \(key.originalTransactionId)
            FOR UPDATE
            """,
            logger: logger)
        for try await customer in rows.decode(String.self) { recorded = customer }
        let appleToken = (transaction.appAccountToken ?? rowToken).flatMap(CustomerId.canonical)
        let owner = recorded ?? appleToken
        var ownerActive = false
        if claim.policy == .transferIfInactive, let owner, owner != claim.customerId {
            ownerActive = try await hasActiveAccess(customer: owner, environment: key.environment, bundleId: key.bundleId, on: connection)
        }
        let decision = OwnershipDecision.decide(policy: claim.policy, customer: claim.customerId, owner: owner, ownerHasActiveAccess: { ownerActive })
        let via: String?
        switch decision {
        case .alreadyOwned: via = recorded == nil ? "token" : nil
        case .bound: via = "bound"
        case .transferred: via = "transferred"
        case .conflict: via = nil
        }
        if let via {
            try await connection.query(
                """
                INSERT INTO customer_ownership (environment, bundle_id, original_transaction_id, customer_id, via)
                VALUES (\(key.environment), \(key.bundleId), \(key.originalTransactionId), \(claim.customerId), \(via))
                ON CONFLICT (environment, bundle_id, original_transaction_id)
                DO UPDATE SET customer_id = EXCLUDED.customer_id, via = EXCLUDED.via, since = now(), apple_token_status = NULL
                """,
                logger: logger)
        }
        if decision == .bound || decision == .transferred {
            try await connection.query(
                """
                INSERT INTO customer_transfers (environment, bundle_id, original_transaction_id, from_customer_id, to_customer_id, policy, purchase_key)
                VALUES (\(key.environment), \(key.bundleId), \(key.originalTransactionId), \(decision == .transferred ? owner : nil), \(claim.customerId),
                    \(claim.policy.rawValue), \(purchaseKey))
                """,
                logger: logger)
        }
        try await connection.query(
            """
            INSERT INTO customer_purchases (purchase_key, environment, bundle_id, transaction_id, original_transaction_id, customer_id, policy, status,
                decision, applied_at)
            VALUES (\(purchaseKey), \(key.environment), \(key.bundleId), \(transaction.transactionId ?? ""), \(key.originalTransactionId), \(claim.customerId),
                \(claim.policy.rawValue), \(decision.accepted ? "accepted" : "conflict"), \(decision.rawValue), now())
            ON CONFLICT (purchase_key) DO UPDATE SET status = EXCLUDED.status, decision = EXCLUDED.decision, applied_at = EXCLUDED.applied_at
            """,
            logger: logger)
        return AppliedClaim(decision: decision, previousOwner: decision == .transferred ? owner : nil)
    }

    /// Whether `customer` has an active subscription or an unrevoked one-time purchase in the app (RevenueCat's
    /// "transfer if there are no active subscriptions").
    func hasActiveAccess(customer: String, environment: String, bundleId: String, on connection: PostgresConnection) async throws -> Bool {
        let rows = try await connection.query(
            """
            SELECT EXISTS (
                SELECT 1 FROM entitlements_now e
                LEFT JOIN customer_ownership o USING (environment, bundle_id, original_transaction_id)
                WHERE e.environment = \(environment) AND e.bundle_id = \(bundleId) AND e.is_active
                    AND coalesce(o.customer_id, lower(e.app_account_token)) = \(customer)
            ) OR EXISTS (
                SELECT 1 FROM transactions t
                LEFT JOIN customer_ownership o
                    ON o.environment = t.environment AND o.bundle_id = t.bundle_id AND o.original_transaction_id = t.original_transaction_id
                WHERE t.environment = \(environment) AND t.bundle_id = \(bundleId) AND t.type IN ('Non-Consumable', 'Non-Renewing Subscription')
                    AND t.revocation_date IS NULL AND (t.expires_date IS NULL OR t.expires_date > now())
                    AND coalesce(o.customer_id, lower(t.app_account_token)) = \(customer)
            )
            """,
            logger: logger)
        for try await active in rows.decode(Bool.self) { return active }
        return false
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

extension EntitlementStore {
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
