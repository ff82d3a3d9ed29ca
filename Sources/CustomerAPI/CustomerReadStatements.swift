import PostgresNIO

/// What one customer read returns: their subscriptions and their one-time purchases.
public struct CustomerReadRows: Sendable, Hashable {
    public var subscriptions: [CustomerSubscriptionRow] = []
    public var oneTimePurchases: [CustomerTransactionRow] = []
}

/// The customer read as one prepared statement: their subscriptions (newest first) and one-time purchases (newest
/// purchase first) in one round trip. Each connection has PostgreSQL plan it once and, after a few executions, reuse
/// a generic plan (as plain queries the CTEs were planned again on every read: 2.7 ms of planning against 1.6 ms of
/// execution, docs/scale.md). It was two statements, each a round trip and a connection from the pool; on the
/// 10-million book that left the read at 7.7 ms p99, one statement brought it under 5 ms (docs/scale.md).
/// `$1` the bundle id, `$2` the customer id (a lower-case UUID), `$3` the environment or NULL for both.
///
/// Each row is `kind` (1 a subscription, 2 a one-time purchase), its place in its list, then the subscription's
/// columns (`CustomerStore.subscriptionColumns`, NULL on a purchase's row) and the purchase's
/// (`CustomerStore.transactionColumns`, NULL on a subscription's).
struct CustomerReadStatement: PostgresPreparedStatement {
    typealias Row = CustomerReadRow
    static let subscriptionColumnCount = 20
    static let transactionColumnCount = 14
    static let sql = """
            WITH token_transactions AS MATERIALIZED (
                -- The customer's transactions by Apple's token: one index probe serves the family rule and the purchases.
                SELECT t.transaction_id, t.app_transaction_id FROM transactions t
                WHERE t.bundle_id = $1 AND lower(t.app_account_token) = $2 AND t.app_account_token IS NOT NULL
            ), ownership AS MATERIALIZED (
                SELECT o.environment, o.original_transaction_id FROM customer_ownership o WHERE o.bundle_id = $1 AND o.customer_id = $2
            ), candidates AS (
                SELECT environment, original_transaction_id FROM ownership
                UNION
                SELECT e.environment, e.original_transaction_id FROM entitlements e
                WHERE e.bundle_id = $1 AND lower(e.app_account_token) = $2 AND e.app_account_token IS NOT NULL
            ), owned AS (
                SELECT e.environment, e.original_transaction_id, e.app_transaction_id FROM candidates k
                JOIN entitlements e ON e.environment = k.environment AND e.bundle_id = $1 AND e.original_transaction_id = k.original_transaction_id
                LEFT JOIN customer_ownership o
                    ON o.environment = k.environment AND o.bundle_id = $1 AND o.original_transaction_id = k.original_transaction_id
                WHERE coalesce(o.customer_id, lower(e.app_account_token)) = $2
            ), own_apps AS (
                -- The member's app transactions: of their subscriptions, and of their own one-time purchases (a member
                -- whose only own rows are consumables still owns the family-shared subscription of their download).
                SELECT app_transaction_id FROM owned WHERE app_transaction_id IS NOT NULL
                UNION
                SELECT app_transaction_id FROM token_transactions WHERE app_transaction_id IS NOT NULL
            ), family AS (
                -- Driven by the member's few app transactions (an index probe each), never by the book's rows without
                -- a token: as `IN (…)`, a misestimated `own_apps` let the planner scan every entitlement without a
                -- token (8 500 of a 1-million book, 117 ms a read) and filter them against it.
                SELECT f.environment, f.original_transaction_id FROM (SELECT DISTINCT app_transaction_id FROM own_apps) a
                CROSS JOIN LATERAL (
                    SELECT e.environment, e.original_transaction_id FROM entitlements e
                    LEFT JOIN customer_ownership o
                        ON o.environment = e.environment AND o.bundle_id = e.bundle_id AND o.original_transaction_id = e.original_transaction_id
                    WHERE e.app_transaction_id = a.app_transaction_id AND e.bundle_id = $1 AND e.app_account_token IS NULL AND o.customer_id IS NULL
                ) f
            ), wanted AS (
                SELECT environment, original_transaction_id FROM owned UNION SELECT environment, original_transaction_id FROM family
            ), purchase_candidates AS (
                SELECT transaction_id FROM token_transactions
                UNION
                SELECT t.transaction_id FROM ownership k
                JOIN transactions t ON t.original_transaction_id = k.original_transaction_id AND t.environment = k.environment AND t.bundle_id = $1
            )
            SELECT 1 AS kind, row_number() OVER (ORDER BY e.last_signed_date DESC, e.original_transaction_id) AS place,
                \(CustomerStore.subscriptionColumns),
                \(Array(repeating: "NULL", count: transactionColumnCount).joined(separator: ", "))
            FROM wanted w
            JOIN entitlements_now e ON e.environment = w.environment AND e.bundle_id = $1 AND e.original_transaction_id = w.original_transaction_id
            LEFT JOIN customer_ownership o ON o.environment = e.environment AND o.bundle_id = e.bundle_id AND o.original_transaction_id = e.original_transaction_id
            WHERE ($3::text IS NULL OR e.environment = $3::text)
            UNION ALL
            SELECT 2, row_number() OVER (ORDER BY t.purchase_date DESC NULLS LAST, t.transaction_id),
                \(Array(repeating: "NULL", count: subscriptionColumnCount).joined(separator: ", ")),
                \(CustomerStore.transactionColumns)
            FROM purchase_candidates k
            JOIN transactions t ON t.transaction_id = k.transaction_id
            LEFT JOIN customer_ownership o USING (environment, bundle_id, original_transaction_id)
            LEFT JOIN entitlements e USING (environment, bundle_id, original_transaction_id)
            WHERE t.type IS DISTINCT FROM 'Auto-Renewable Subscription' AND t.bundle_id = $1
                AND ($3::text IS NULL OR t.environment = $3::text)
                AND coalesce(o.customer_id, lower(t.app_account_token)) = $2
            ORDER BY 1, 2
        """
    static let bindingDataTypes: [PostgresDataType] = [.text, .text, .text]

    var bundleId: String
    var customerId: String
    var environment: String?

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(bundleId)
        bindings.append(customerId)
        bindings.append(environment)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> CustomerReadRow {
        let cells = row.makeRandomAccess()
        if try cells[0].decode(Int.self) == 1 { return .subscription(try CustomerStore.subscriptionRow(cells, from: 2)) }
        return .oneTimePurchase(try CustomerStore.transactionRow(cells, from: 2 + Self.subscriptionColumnCount))
    }
}

/// One row of `CustomerReadStatement`.
enum CustomerReadRow: Sendable {
    case subscription(CustomerSubscriptionRow)
    case oneTimePurchase(CustomerTransactionRow)
}
