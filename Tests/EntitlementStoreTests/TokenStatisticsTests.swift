import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestGates
import TestSupport
import Testing

/// Migration 26: the customer read's token lookups are estimated from statistics on `lower(app_account_token)`.
/// The partial expression indexes they use have statistics of their own, which the planner ignores; without
/// migration 26's it falls back to a default selectivity (0.5 % of the table: 50 144 rows on the 10-million book for
/// one customer's one row), which turned on JIT and can choose a worse join (docs/scale.md).
@Suite("Planner statistics on the customer's token", .serialized, .requiresPostgres)
struct TokenStatisticsTests {
    static let logger = quietLogger("token-statistics-tests")

    @Test("a lookup of one customer's token is estimated at a few rows on transactions and entitlements, not a fraction of the table")
    func tokenLookupsAreEstimatedFromTheExpressionStatistics() async throws {
        try await withMigratedStore("tokenstats", logger: Self.logger) { _, client in
            // 20 000 subscriptions of one app, each with its own token in mixed case (as apps send them).
            for statement in [
                """
                INSERT INTO transactions (transaction_id, original_transaction_id, environment, bundle_id, signed_date, payload, app_account_token)
                SELECT 't' || i, 'o' || i, 'Production', 'com.example.stats', now(), '{}'::jsonb,
                    upper(md5('token' || i)::uuid::text)
                FROM generate_series(1, 20000) i
                """,
                """
                INSERT INTO entitlements (environment, bundle_id, original_transaction_id, status, last_notification_type, last_signed_date, state,
                    app_account_token)
                SELECT 'Production', 'com.example.stats', 'o' || i, 'active', 'SUBSCRIBED', now(), '{}'::jsonb, upper(md5('token' || i)::uuid::text)
                FROM generate_series(1, 20000) i
                """,
                "ANALYZE transactions, entitlements",
            ] {
                try await client.query(PostgresQuery(unsafeSQL: statement), logger: Self.logger)
            }
            var lowered = ""
            for try await value in try await client.query("SELECT lower(app_account_token) FROM transactions WHERE transaction_id = 't77'", logger: Self.logger)
                .decode(String.self) { lowered = value }
            #expect(lowered.count == 36)
            let token = "'\(lowered)'"
            let transactions = try await estimate(client, """
                SELECT transaction_id FROM transactions
                WHERE bundle_id = 'com.example.stats' AND lower(app_account_token) = \(token) AND app_account_token IS NOT NULL
                """)
            let entitlements = try await estimate(client, """
                SELECT original_transaction_id FROM entitlements
                WHERE bundle_id = 'com.example.stats' AND lower(app_account_token) = \(token) AND app_account_token IS NOT NULL
                """)
            // The default selectivity would say 100 (0.5 % of 20 000); the statistics say about one.
            #expect(transactions <= 5, "transactions: \(transactions) rows estimated for one")
            #expect(entitlements <= 5, "entitlements: \(entitlements) rows estimated for one")
        }
    }

    /// The planner's row estimate for `query` (the top node of `EXPLAIN`).
    func estimate(_ client: PostgresClient, _ query: String) async throws -> Int {
        var plan = ""
        for try await line in try await client.query(PostgresQuery(unsafeSQL: "EXPLAIN " + query), logger: Self.logger).decode(String.self) where plan.isEmpty {
            plan = line
        }
        guard let match = plan.firstMatch(of: /rows=(\d+)/), let rows = Int(match.1) else { throw EstimateNotFound(plan: plan) }
        return rows
    }

    struct EstimateNotFound: Error { var plan: String }
}
