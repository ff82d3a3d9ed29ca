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
            ON CONFLICT (purchase_key, original_transaction_id) DO UPDATE SET status = EXCLUDED.status, decision = EXCLUDED.decision, applied_at = EXCLUDED.applied_at
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

