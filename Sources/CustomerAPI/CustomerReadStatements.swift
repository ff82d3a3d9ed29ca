import PostgresNIO

/// The customer read's two statements, prepared: each connection has PostgreSQL plan them once, and after a few
/// executions reuse a generic plan. As plain queries their CTEs were planned again on every read: 2.7 ms of planning
/// against 1.6 ms of execution for a customer with 20 subscriptions, 0.4 ms in all once prepared (docs/scale.md).
/// `$1` the bundle id, `$2` the customer id (a lower-case UUID), `$3` the environment or NULL for both.
struct CustomerSubscriptionsStatement: PostgresPreparedStatement {
    typealias Row = CustomerSubscriptionRow
    static let sql = """
            WITH candidates AS (
                SELECT o.environment, o.original_transaction_id FROM customer_ownership o WHERE o.bundle_id = $1 AND o.customer_id = $2
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
                SELECT t.app_transaction_id FROM transactions t
                WHERE t.bundle_id = $1 AND lower(t.app_account_token) = $2 AND t.app_account_token IS NOT NULL
                    AND t.app_transaction_id IS NOT NULL
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
            )
            SELECT \(CustomerStore.subscriptionColumns) FROM wanted w
            JOIN entitlements_now e ON e.environment = w.environment AND e.bundle_id = $1 AND e.original_transaction_id = w.original_transaction_id
            LEFT JOIN customer_ownership o ON o.environment = e.environment AND o.bundle_id = e.bundle_id AND o.original_transaction_id = e.original_transaction_id
            WHERE ($3::text IS NULL OR e.environment = $3::text)
            ORDER BY e.last_signed_date DESC, e.original_transaction_id
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

    func decodeRow(_ row: PostgresRow) throws -> CustomerSubscriptionRow { try CustomerStore.subscriptionRow(row) }
}

struct CustomerOneTimePurchasesStatement: PostgresPreparedStatement {
    typealias Row = CustomerTransactionRow
    static let sql = """
            WITH candidates AS (
                SELECT t.transaction_id FROM transactions t
                WHERE t.bundle_id = $1 AND lower(t.app_account_token) = $2 AND t.app_account_token IS NOT NULL
                UNION
                SELECT t.transaction_id FROM customer_ownership o
                JOIN transactions t ON t.original_transaction_id = o.original_transaction_id AND t.environment = o.environment AND t.bundle_id = o.bundle_id
                WHERE o.bundle_id = $1 AND o.customer_id = $2
            )
            SELECT \(CustomerStore.transactionColumns) FROM candidates k
            JOIN transactions t ON t.transaction_id = k.transaction_id
            LEFT JOIN customer_ownership o USING (environment, bundle_id, original_transaction_id)
            LEFT JOIN entitlements e USING (environment, bundle_id, original_transaction_id)
            WHERE t.type IS DISTINCT FROM 'Auto-Renewable Subscription'
                AND ($3::text IS NULL OR t.environment = $3::text)
                AND coalesce(o.customer_id, lower(t.app_account_token)) = $2
            ORDER BY t.purchase_date DESC NULLS LAST, t.transaction_id
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

    func decodeRow(_ row: PostgresRow) throws -> CustomerTransactionRow { try CustomerStore.transactionRow(row) }
}
