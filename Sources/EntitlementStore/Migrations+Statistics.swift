extension Migrations {
    /// Migration 26: statistics on `lower(app_account_token)` for the planner. The customer read finds a customer's
    /// rows through the partial expression indexes `(bundle_id, lower(app_account_token)) WHERE app_account_token IS
    /// NOT NULL`, but PostgreSQL ignores a partial index's statistics when it estimates (they need not describe the
    /// whole table), so it guessed 8 098 and 50 247 rows where 20 were found on the 10-million book: JIT compiled the
    /// read, and a misestimate can pick a worse join. Expression statistics (PostgreSQL 14) describe the expression
    /// over the whole table; `ANALYZE` fills them (autovacuum's too).
    static let tokenStatistics = Migration(version: 26, name: "planner statistics on lower(app_account_token)", sql: [
        "CREATE STATISTICS transactions_lower_app_account_token ON (lower(app_account_token)) FROM transactions",
        "CREATE STATISTICS entitlements_lower_app_account_token ON (lower(app_account_token)) FROM entitlements",
        "ANALYZE transactions, entitlements",
    ])
}
