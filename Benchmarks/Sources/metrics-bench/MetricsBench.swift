import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import SubscriptionMetrics
import TestSupport

/// How long each subscription metric takes on a volume of transactions (docs/metrics.md, docs/benchmarks.md).
///
/// Creates a database of its own on the PostgreSQL of the argument, migrates it, and fills `transactions` with
/// SUBSCRIPTIONS synthetic subscriptions (monthly and yearly products, a third starting with a week's free trial,
/// one in fifty refunded, one in twenty family-shared, two currencies, one to twelve periods each, starts spread over
/// 2025): about 3.3 transactions per subscription, so the default 300 000 is a million rows. Then applies them to the
/// daily rollups, times every metric over 2025 by month, Production, one bundle, computed in full and from the
/// rollups, and says whether both gave the same rows (the reference in the same run: `SELECT count(*)` over the same
/// rows, one sequential scan), and prints `EXPLAIN (ANALYZE, BUFFERS)` of the heaviest full one with `--explain`.
///
/// Usage: metrics-bench POSTGRES_URL [SUBSCRIPTIONS=300000] [--explain]
@main
struct MetricsBench {
    static func main() async throws {
        let arguments = BenchArguments(usage: "metrics-bench POSTGRES_URL [SUBSCRIPTIONS] [--explain]", required: 1, CommandLine.arguments.filter { $0 != "--explain" })
        let explain = CommandLine.arguments.contains("--explain")
        let postgresURL = arguments[1]
        let subscriptions = arguments.int(2, default: 300_000)
        var logger = Logger(label: "metrics-bench")
        logger.logLevel = .critical

        let database = "bench_metrics_\(UUID().uuidString.prefix(8).lowercased())"
        let admin = PostgresClient(configuration: try .init(url: postgresURL), backgroundLogger: logger)
        var configuration = try PostgresClient.Configuration(url: postgresURL)
        configuration.database = database
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await admin.run() }
            group.addTask { await client.run() }
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: logger)
            defer { print("(database \(database) left for inspection: DROP DATABASE \(database))") }
            let store = EntitlementStore(client: client, logger: logger)
            try await store.migrate()

            let fill = ContinuousClock.now
            try await client.query(
                """
                INSERT INTO transactions (transaction_id, original_transaction_id, environment, bundle_id, product_id, type, purchase_date,
                    expires_date, quantity, revocation_date, price, currency, ownership_type, signed_date, payload)
                SELECT 't' || s || '-' || k, 'o' || s, 'Production', 'com.example.bench',
                    CASE WHEN s % 4 = 0 THEN 'bench.yearly' ELSE 'bench.monthly' END, 'Auto-Renewable Subscription',
                    p.purchase, p.expires, 1,
                    CASE WHEN s % 50 = 0 AND k = 1 THEN p.purchase + interval '3 days' END,
                    CASE WHEN trial AND k = 0 THEN 0 WHEN s % 4 = 0 THEN 49990 ELSE 5990 END,
                    CASE WHEN s % 3 = 0 THEN 'EUR' ELSE 'USD' END,
                    CASE WHEN s % 20 = 0 THEN 'FAMILY_SHARED' ELSE 'PURCHASED' END,
                    p.purchase,
                    jsonb_build_object('storefront', CASE WHEN s % 3 = 0 THEN 'DEU' ELSE 'USA' END)
                        || CASE WHEN trial AND k = 0 THEN '{"offerType": 1, "offerDiscountType": "FREE_TRIAL", "offerPeriod": "P1W"}'::jsonb ELSE '{}'::jsonb END
                FROM generate_series(1, \(subscriptions)) AS s
                CROSS JOIN LATERAL (SELECT s % 3 = 1 AS trial, timestamptz '2025-01-01 12:00Z' + (s % 365) * interval '1 day' AS start,
                    CASE WHEN s % 4 = 0 THEN 1 + s % 2 ELSE 1 + (s * 7) % 5 END AS periods) x
                CROSS JOIN LATERAL generate_series(0, x.periods - 1) AS k
                CROSS JOIN LATERAL (SELECT
                    CASE WHEN x.trial AND k > 0 THEN x.start + interval '7 days' + (k - 1) * (CASE WHEN s % 4 = 0 THEN interval '1 year' ELSE interval '1 month' END)
                        ELSE x.start + k * (CASE WHEN s % 4 = 0 THEN interval '1 year' ELSE interval '1 month' END) END AS purchase) q
                CROSS JOIN LATERAL (SELECT q.purchase,
                    CASE WHEN x.trial AND k = 0 THEN q.purchase + interval '7 days'
                        ELSE q.purchase + CASE WHEN s % 4 = 0 THEN interval '1 year' ELSE interval '1 month' END END AS expires) p
                """,
                logger: logger)
            try await client.query("INSERT INTO exchange_rates VALUES ('EUR', 'USD', '2024-12-31', 1.08)", logger: logger)
            try await client.query("ANALYZE transactions", logger: logger)
            var rows = 0
            for try await count in try await client.query("SELECT count(*)::int FROM transactions", logger: logger).decode(Int.self) { rows = count }
            print("filled \(rows) transactions for \(subscriptions) subscriptions in \(seconds(ContinuousClock.now - fill)) s")

            let reference = ContinuousClock.now
            for try await _ in try await client.query("SELECT count(*) FROM transactions WHERE type = 'Auto-Renewable Subscription'", logger: logger) {}
            let scan = ContinuousClock.now - reference
            print("reference: one count(*) scan of the rows: \(seconds(scan)) s")

            // The rollups (migration 27) were built empty by the migration; the fill marked every subscription
            // changed, and the aggregator applies them as the workers' maintenance round would.
            let metrics = MetricsStore(client: store.client, logger: store.logger)
            let applying = ContinuousClock.now
            let applied = try await metrics.applyRollups(catalog: true)
            print("rollups: \(applied) changed subscriptions applied in \(seconds(ContinuousClock.now - applying)) s")

            let query = MetricQuery(from: Date(timeIntervalSince1970: 1_735_689_600), to: Date(timeIntervalSince1970: 1_767_225_600), bucket: .month,
                                    environment: "Production", bundleId: "com.example.bench")
            print("metric                  full s    × scan   rollups s  × scan   same rows  (2025 by month, Production, one bundle)")
            for metric in SubscriptionMetric.allCases {
                let started = ContinuousClock.now
                let full = try await metrics.metric(metric, query, statementTimeoutMilliseconds: 600_000, refreshCatalog: false, source: .full)
                let fullTook = ContinuousClock.now - started
                let rolled = ContinuousClock.now
                let rollups = try await metrics.metric(metric, query, statementTimeoutMilliseconds: 600_000, refreshCatalog: false, source: .rollups)
                let rollupsTook = ContinuousClock.now - rolled
                print("\(metric.rawValue.padding(toLength: 22, withPad: " ", startingAt: 0))  \(seconds(fullTook).padding(toLength: 8, withPad: " ", startingAt: 0))  "
                    + String(format: "%6.1f", ratio(fullTook, scan)) + "   \(seconds(rollupsTook).padding(toLength: 9, withPad: " ", startingAt: 0))  "
                    + String(format: "%6.3f", ratio(rollupsTook, scan)) + "   \(full == rollups ? "yes" : "NO")")
            }
            let refresh = ContinuousClock.now
            _ = try await MetricsStore(client: store.client, logger: store.logger).refreshProductCatalog()
            print("refresh_product_catalog alone: \(seconds(ContinuousClock.now - refresh)) s")
            if explain {
                print("\nEXPLAIN (ANALYZE, BUFFERS) of metric_churn's body (the heaviest), with the work_mem the metrics run with:")
                try await client.withTransaction(logger: logger) { connection -> Void in
                    _ = try await connection.query("SET LOCAL work_mem = '256MB'", logger: logger)
                    let plan = try await connection.query(
                        """
                        EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM metric_churn('2025-01-01', '2026-01-01', 'month', 'Production', 'com.example.bench', NULL, NULL)
                        """, logger: logger)
                    for try await line in plan.decode(String.self) { print(line) }
                }
            }
            group.cancelAll()
        }
    }

    static func seconds(_ duration: Duration) -> String {
        String(format: "%.3f", Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }

    static func ratio(_ a: Duration, _ b: Duration) -> Double {
        let x = Double(a.components.seconds) + Double(a.components.attoseconds) / 1e18
        let y = Double(b.components.seconds) + Double(b.components.attoseconds) / 1e18
        return y > 0 ? x / y : 0
    }
}
