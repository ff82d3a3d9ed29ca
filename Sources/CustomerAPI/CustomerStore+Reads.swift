import Foundation
import Logging
import PostgresNIO

/// A subscription as the customer API answers it: the row of `entitlements_now` with its owner.
public struct CustomerSubscriptionRow: Sendable, Hashable {
    public var originalTransactionId: String
    public var environment: String
    public var productId: String?
    public var subscriptionGroupId: String?
    public var status: String
    public var isActive: Bool
    public var expiresAt: Date?
    public var autoRenewStatus: Int?
    public var autoRenewProductId: String?
    public var gracePeriodExpiresAt: Date?
    public var billingIssueSince: Date?
    public var revocationDate: Date?
    public var ownershipType: String?
    /// The owner: `customer_ownership`'s, else the row's `appAccountToken` (lower case).
    public var customerId: String?
    public var appAccountToken: String?
    public var appTransactionId: String?
    /// The sequence of the row's last entitlement event (nil before any).
    public var sequence: Int64?
    public var contradiction: String?
    public var lastNotificationType: String
    public var lastSignedDate: Date
}

/// A transaction as the customer API answers it (a subscription period or a one-time purchase).
public struct CustomerTransactionRow: Sendable, Hashable {
    public var transactionId: String
    public var originalTransactionId: String
    public var environment: String
    public var productId: String?
    public var type: String?
    public var purchaseDate: Date?
    public var expiresDate: Date?
    public var revocationDate: Date?
    public var revocationReason: Int?
    public var ownershipType: String?
    public var appAccountToken: String?
    /// The owner of its subscription (or of the purchase itself): our table's, else Apple's token.
    public var customerId: String?
    public var signedDate: Date
    /// Not revoked and, where it expires, not expired.
    public var isActive: Bool
}

/// The reads behind the customer API. Ownership is `customer_ownership`'s when it has a row, else Apple's
/// `appAccountToken` (compared in lower case); family-shared rows (which never carry a token) belong to the customer
/// whose own rows share their `app_transaction_id` (Apple's id of one Apple Account's download of the app).
extension CustomerStore {
    static var subscriptionColumns: String { """
        e.original_transaction_id, e.environment, e.product_id, e.subscription_group_id, e.status, e.is_active, e.expires_at, e.auto_renew_status,
        e.auto_renew_product_id, e.grace_period_expires_at, e.billing_issue_since, e.revocation_date, e.ownership_type,
        coalesce(o.customer_id, lower(e.app_account_token)), e.app_account_token, e.app_transaction_id, e.event_sequence, e.contradiction,
        e.last_notification_type, e.last_signed_date
        """
    }

    /// Every subscription of `customerId` in `bundleId` (and the family-shared ones linked to them), newest first,
    /// and their one-time purchases (consumables, non-consumables, non-renewing subscriptions), newest first: one
    /// prepared statement, one round trip (`CustomerReadStatement`). Candidates come from indexes only
    /// (`customer_ownership` by customer, `entitlements` and `transactions` by lower-case token), then the owner
    /// rule is applied to them: no scan of a table, whatever its size (docs/customer-api.md).
    public func customer(bundleId: String, customerId: String, environment: String?) async throws -> CustomerReadRows {
        var result = CustomerReadRows()
        let statement = CustomerReadStatement(bundleId: bundleId, customerId: customerId, environment: environment)
        for try await row in try await client.execute(statement, logger: logger) {
            switch row {
            case .subscription(let subscription): result.subscriptions.append(subscription)
            case .oneTimePurchase(let purchase): result.oneTimePurchases.append(purchase)
            }
        }
        return result
    }

    /// The subscription `originalTransactionId` of `bundleId`, one row per environment it exists in.
    public func subscriptions(bundleId: String, originalTransactionId: String, environment: String?) async throws -> [CustomerSubscriptionRow] {
        try await selectSubscriptions(
            """
            SELECT \(unescaped: Self.subscriptionColumns) FROM entitlements_now e
            LEFT JOIN customer_ownership o USING (environment, bundle_id, original_transaction_id)
            WHERE e.bundle_id = \(bundleId) AND e.original_transaction_id = \(originalTransactionId)
                AND (\(environment)::text IS NULL OR e.environment = \(environment)::text)
            ORDER BY e.environment
            """)
    }

    private func selectSubscriptions(_ query: PostgresQuery) async throws -> [CustomerSubscriptionRow] {
        var result: [CustomerSubscriptionRow] = []
        for try await row in try await client.query(query, logger: logger) { result.append(try Self.subscriptionRow(row)) }
        return result
    }

    static func subscriptionRow(_ row: PostgresRow) throws -> CustomerSubscriptionRow { try subscriptionRow(row.makeRandomAccess(), from: 0) }

    /// The subscription whose columns (`subscriptionColumns`) start at cell `first`.
    static func subscriptionRow(_ cells: PostgresRandomAccessRow, from first: Int) throws -> CustomerSubscriptionRow {
            let c = OffsetCells(cells: cells, first: first)
            return CustomerSubscriptionRow(
                originalTransactionId: try c[0].decode(String.self), environment: try c[1].decode(String.self), productId: try c[2].decode(String?.self),
                subscriptionGroupId: try c[3].decode(String?.self), status: try c[4].decode(String.self), isActive: try c[5].decode(Bool.self),
                expiresAt: try c[6].decode(Date?.self), autoRenewStatus: try c[7].decode(Int?.self), autoRenewProductId: try c[8].decode(String?.self),
                gracePeriodExpiresAt: try c[9].decode(Date?.self), billingIssueSince: try c[10].decode(Date?.self), revocationDate: try c[11].decode(Date?.self),
                ownershipType: try c[12].decode(String?.self), customerId: try c[13].decode(String?.self), appAccountToken: try c[14].decode(String?.self),
                appTransactionId: try c[15].decode(String?.self), sequence: try c[16].decode(Int64?.self), contradiction: try c[17].decode(String?.self),
                lastNotificationType: try c[18].decode(String.self), lastSignedDate: try c[19].decode(Date.self))
    }

    static var transactionColumns: String { """
        t.transaction_id, t.original_transaction_id, t.environment, t.product_id, t.type, t.purchase_date, t.expires_date, t.revocation_date,
        t.revocation_reason, t.ownership_type, t.app_account_token, coalesce(o.customer_id, lower(t.app_account_token), lower(e.app_account_token)),
        t.signed_date, (t.revocation_date IS NULL AND (t.expires_date IS NULL OR t.expires_date > now()))
        """
    }

    /// The transactions of `bundleId` with these ids (any environment unless one is given).
    public func transactions(bundleId: String, transactionIds: [String], environment: String?) async throws -> [CustomerTransactionRow] {
        try await selectTransactions(
            """
            SELECT \(unescaped: Self.transactionColumns) FROM transactions t
            LEFT JOIN customer_ownership o USING (environment, bundle_id, original_transaction_id)
            LEFT JOIN entitlements e USING (environment, bundle_id, original_transaction_id)
            WHERE t.bundle_id = \(bundleId) AND t.transaction_id = ANY(\(transactionIds)::text[])
                AND (\(environment)::text IS NULL OR t.environment = \(environment)::text)
            ORDER BY t.signed_date DESC, t.transaction_id
            """)
    }

    /// Our own rows for an order id, where Apple cannot be asked: transactions whose id or web order line item id
    /// is `orderId`.
    public func transactionsOfOrder(bundleId: String, orderId: String, environment: String?) async throws -> [CustomerTransactionRow] {
        try await selectTransactions(
            """
            SELECT \(unescaped: Self.transactionColumns) FROM transactions t
            LEFT JOIN customer_ownership o USING (environment, bundle_id, original_transaction_id)
            LEFT JOIN entitlements e USING (environment, bundle_id, original_transaction_id)
            WHERE t.bundle_id = \(bundleId) AND (t.transaction_id = \(orderId) OR t.payload->>'webOrderLineItemId' = \(orderId))
                AND (\(environment)::text IS NULL OR t.environment = \(environment)::text)
            ORDER BY t.signed_date DESC, t.transaction_id
            """)
    }

    private func selectTransactions(_ query: PostgresQuery) async throws -> [CustomerTransactionRow] {
        var result: [CustomerTransactionRow] = []
        for try await row in try await client.query(query, logger: logger) { result.append(try Self.transactionRow(row)) }
        return result
    }

    static func transactionRow(_ row: PostgresRow) throws -> CustomerTransactionRow { try transactionRow(row.makeRandomAccess(), from: 0) }

    /// The transaction whose columns (`transactionColumns`) start at cell `first`.
    static func transactionRow(_ cells: PostgresRandomAccessRow, from first: Int) throws -> CustomerTransactionRow {
            let c = OffsetCells(cells: cells, first: first)
            return CustomerTransactionRow(
                transactionId: try c[0].decode(String.self), originalTransactionId: try c[1].decode(String.self), environment: try c[2].decode(String.self),
                productId: try c[3].decode(String?.self), type: try c[4].decode(String?.self), purchaseDate: try c[5].decode(Date?.self),
                expiresDate: try c[6].decode(Date?.self), revocationDate: try c[7].decode(Date?.self), revocationReason: try c[8].decode(Int?.self),
                ownershipType: try c[9].decode(String?.self), appAccountToken: try c[10].decode(String?.self), customerId: try c[11].decode(String?.self),
                signedDate: try c[12].decode(Date.self), isActive: try c[13].decode(Bool.self))
    }
}

/// A row's cells counted from `first`: one decoder serves a row of its own and a part of the customer read's row.
struct OffsetCells {
    let cells: PostgresRandomAccessRow
    let first: Int
    subscript(index: Int) -> PostgresCell { cells[first + index] }
}
