import Foundation
import Logging
import PostgresNIO

/// A subscription metric: one SQL function of migration 14 (docs/metrics.md has each definition). The cases are
/// the names `pipelinectl metrics` takes.
public enum SubscriptionMetric: String, CaseIterable, Sendable {
    case activeSubscriptions = "active-subscriptions"
    case mrr
    case mrrMovement = "mrr-movement"
    case newSubscriptions = "new-subscriptions"
    case trialConversion = "trial-conversion"
    case churn
    case refunds
    case refundRequests = "refund-requests"
    case retention

    /// Other names a person may reach for (RevenueCat's chart names among them), each the metric whose columns
    /// include that figure.
    public static let aliases: [String: SubscriptionMetric] = [
        "active": .activeSubscriptions, "active-trials": .activeSubscriptions, "arr": .mrr, "mrr-movements": .mrrMovement,
        "new-trials": .newSubscriptions, "new-paid-subscriptions": .newSubscriptions, "trial-conversions": .trialConversion,
        "churn-rate": .churn, "refund-rate": .refunds, "subscription-retention": .retention,
    ]

    /// The metric called `name` (its own name or an alias).
    public init?(named name: String) {
        guard let metric = SubscriptionMetric(rawValue: name) ?? Self.aliases[name] else { return nil }
        self = metric
    }

    /// Whether it reads the product catalog's durations: only the money metrics do (a period's monthly value is its
    /// price normalised by its duration). The others need no refresh of the catalog first, which is a scan of
    /// `transactions` (1.1 s on a book of a million transactions, docs/scale.md).
    public var readsProductCatalog: Bool { self == .mrr || self == .mrrMovement }

    /// The SQL function that computes it.
    public var function: String {
        switch self {
        case .activeSubscriptions: "metric_active_subscriptions"
        case .mrr: "metric_mrr"
        case .mrrMovement: "metric_mrr_movement"
        case .newSubscriptions: "metric_new_subscriptions"
        case .trialConversion: "metric_trial_conversion"
        case .churn: "metric_churn"
        case .refunds: "metric_refunds"
        case .refundRequests: "metric_refund_requests"
        case .retention: "metric_retention"
        }
    }

    /// Its columns, in order (the function's result columns).
    public var columns: [String] {
        let bucket = ["bucket_start", "bucket_end"]
        switch self {
        case .activeSubscriptions: return bucket + ["active_paid", "active_trials", "active_family_shared"]
        case .mrr: return bucket + ["currency", "mrr", "arr", "active_paid", "unconverted"]
        case .mrrMovement: return bucket + ["currency", "new_mrr", "resubscription_mrr", "churned_mrr", "net_mrr", "unconverted"]
        case .newSubscriptions: return bucket + ["new_trials", "new_paid", "new_family_shared"]
        case .trialConversion: return bucket + ["trials", "converted", "pending", "abandoned", "conversion_rate"]
        case .churn: return bucket + ["active_at_start", "churned", "churn_rate", "resubscribed"]
        case .refunds: return bucket + ["currency", "paid_periods", "refunded", "refund_rate", "refunded_amount", "unconverted"]
        case .refundRequests: return bucket + ["requested", "granted", "declined", "reversed"]
        case .retention: return bucket + ["period", "cohort", "retained", "retention"]
        }
    }

    /// Whether it sums money (and so takes a reporting currency).
    public var takesCurrency: Bool { columns.contains("currency") }

    /// The function answering it from migration 27's daily rollups.
    public var rollupFunction: String { "metric_rollup_" + function.dropFirst("metric_".count) }
}

/// Where a metric is computed from (docs/scale.md, "Metrics from rollups").
public enum MetricSource: String, CaseIterable, Sendable {
    /// The rollups when they can answer the query and are built, else the full computation.
    case automatic
    /// Migration 27's daily rollups; an error when they cannot answer (`MetricRollupsUnavailable`).
    case rollups
    /// Migration 14's computation over every period.
    case full
}

/// The rollups cannot answer a query asked of them explicitly.
public struct MetricRollupsUnavailable: Error, CustomStringConvertible {
    public var reason: String
    public var description: String { "the metric rollups cannot answer this: \(reason)" }
}

extension MetricQuery {
    /// Why the rollups cannot answer this query, or nil when they can: they are kept per environment, app and UTC
    /// day, so a product or storefront filter, or a range whose ends are not UTC midnights, needs the full
    /// computation.
    public var rollupRefusal: String? {
        if productId != nil { return "a product filter" }
        if storefront != nil { return "a storefront filter" }
        let midnight = { (date: Date) in date.timeIntervalSince1970.truncatingRemainder(dividingBy: 86_400) == 0 }
        if !midnight(from) || !midnight(to) { return "the range does not start and end at UTC midnights" }
        return nil
    }
}

/// The state of the rollups (`pipelinectl metrics rollups status`).
public struct MetricRollupStatus: Sendable, Hashable {
    /// Whether they were built (on an empty database at migration, else by `rebuildRollups`).
    public var built: Bool
    /// Subscriptions changed since their contributions were last applied.
    public var pending: Int64
    /// Subscription periods held.
    public var periods: Int64
}

/// A row where the rollups and the full computation disagree (`pipelinectl metrics compare`).
public struct MetricDifference: Sendable, Hashable, CustomStringConvertible {
    public var metric: String
    public var full: [String?]?
    public var rollups: [String?]?

    public var description: String {
        func line(_ row: [String?]?) -> String { row.map { $0.map { $0 ?? "-" }.joined(separator: " ") } ?? "(no row)" }
        return "\(metric)\n  full:    \(line(full))\n  rollups: \(line(rollups))"
    }
}

/// A metric setting that is not a plain value (it would be spliced into SQL).
public struct MetricSettingError: Error, CustomStringConvertible {
    public var setting: String
    public var value: String
    public var description: String { "\(setting) must be letters and digits only (e.g. 64MB), not \(value.debugDescription)" }
}

/// The bucket a metric is grouped by (UTC; weeks start on Monday).
public enum MetricBucket: String, CaseIterable, Sendable {
    case day, week, month, quarter, year
}

/// What a metric is computed over. `to` is exclusive.
public struct MetricQuery: Sendable, Hashable {
    public var from: Date
    public var to: Date
    public var bucket: MetricBucket
    /// `Production` or `Sandbox`: never mixed.
    public var environment: String
    public var bundleId: String?
    public var productId: String?
    public var storefront: String?
    /// The reporting currency of money metrics (`exchange_rates` converts the others into it).
    public var currency: String

    public init(from: Date, to: Date, bucket: MetricBucket = .month, environment: String = "Production", bundleId: String? = nil,
                productId: String? = nil, storefront: String? = nil, currency: String = "USD") {
        self.from = from
        self.to = to
        self.bucket = bucket
        self.environment = environment
        self.bundleId = bundleId
        self.productId = productId
        self.storefront = storefront
        self.currency = currency
    }
}

/// A metric's rows as text (timestamps in ISO 8601 UTC, numbers as PostgreSQL prints them, so nothing is rounded on
/// the way), in the columns of `SubscriptionMetric.columns`.
public struct MetricTable: Sendable, Hashable {
    public var columns: [String]
    public var rows: [[String?]]

    public init(columns: [String], rows: [[String?]]) {
        self.columns = columns
        self.rows = rows
    }

    /// The value of `column` in row `row`.
    public func value(_ column: String, row: Int) -> String? {
        guard let index = columns.firstIndex(of: column), rows.indices.contains(row) else { return nil }
        return rows[row][index]
    }
}

/// A product's subscription duration as the catalog holds it.
public struct ProductCatalogEntry: Sendable, Hashable {
    public var productId: String
    /// ISO 8601 (P1W, P1M, P2M, P3M, P6M, P1Y).
    public var duration: String
    /// `observed` (from transactions) or `manual` (`pipelinectl products set`).
    public var source: String
    public var observedPeriods: Int64
}

/// One exchange rate: one unit of `currency` is `rate` units of `reportingCurrency` on `date` (a UTC day).
public struct ExchangeRate: Sendable, Hashable {
    public var date: String
    public var currency: String
    public var reportingCurrency: String
    public var rate: String

    public init(date: String, currency: String, reportingCurrency: String, rate: String) {
        self.date = date
        self.currency = currency
        self.reportingCurrency = reportingCurrency
        self.rate = rate
    }
}

extension MetricsStore {
    /// Computes `metric` over `query` in one transaction with a statement timeout, after refreshing the product
    /// catalog from the transactions observed so far (manual durations are kept) when the metric reads it
    /// (`readsProductCatalog`) and `refreshCatalog` is true (a caller asking for several pieces of one range
    /// refreshes once). `work_mem` is raised for the transaction
    /// (`workMemory`, PostgreSQL's units): the period windows sort a bundle's periods, and in memory that is
    /// several times faster than through temporary files.
    ///
    /// `source` says where from: the daily rollups answer a query without product or storefront filter over UTC days
    /// (`MetricQuery.rollupRefusal`) once built; then `refreshCatalog` also applies the subscriptions changed since
    /// (`metric_rollups_apply`), and the catalog is refreshed from the observations the rollups keep.
    public func metric(_ metric: SubscriptionMetric, _ query: MetricQuery, statementTimeoutMilliseconds: Int = 120_000, refreshCatalog: Bool = true,
                       workMemory: String = "256MB", source: MetricSource = .automatic) async throws -> MetricTable {
        guard workMemory.allSatisfy({ $0.isASCII && ($0.isNumber || $0.isLetter) }) else { throw MetricSettingError(setting: "work_mem", value: workMemory) }
        let select = metric.columns.map { column in
            column.hasPrefix("bucket_") ? "to_char(\(column) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')" : "\(column)::text"
        }.joined(separator: ", ")
        let refusal = query.rollupRefusal
        if source == .rollups, let refusal { throw MetricRollupsUnavailable(reason: refusal) }
        return try await client.withTransaction(logger: logger) { connection in
            try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL statement_timeout = \(max(1, statementTimeoutMilliseconds))"), logger: logger)
            try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL work_mem = '\(workMemory)'"), logger: logger)
            var fromRollups = false
            if source != .full, refusal == nil {
                for try await built in try await connection.query("SELECT built FROM metric_rollup_state", logger: logger).decode(Bool.self) { fromRollups = built }
                if source == .rollups, !fromRollups { throw MetricRollupsUnavailable(reason: "they are not built yet (pipelinectl metrics rollups rebuild)") }
            }
            if fromRollups {
                // Small sums: the planner's default guesses for the bucket function (1 000 rows) put a year of
                // retention over jit_above_cost, and compiling took 240 of its 245 ms on the ten-million book.
                try await connection.query("SET LOCAL jit = off", logger: logger)
                if refreshCatalog { try await Self.catchUp(catalog: metric.readsProductCatalog, on: connection, logger: logger) }
                let function = metric.rollupFunction
                let sql: PostgresQuery = metric.takesCurrency
                    ? "SELECT \(unescaped: select) FROM \(unescaped: function)(\(query.from), \(query.to), \(query.bucket.rawValue), \(query.environment), \(query.bundleId), \(query.currency))"
                    : "SELECT \(unescaped: select) FROM \(unescaped: function)(\(query.from), \(query.to), \(query.bucket.rawValue), \(query.environment), \(query.bundleId))"
                return MetricTable(columns: metric.columns, rows: try await Self.rows(sql, columns: metric.columns.count, on: connection, logger: logger))
            }
            if refreshCatalog && metric.readsProductCatalog { try await connection.query("SELECT refresh_product_catalog()", logger: logger) }
            let sql: PostgresQuery
            if metric.takesCurrency {
                sql = """
                    SELECT \(unescaped: select) FROM \(unescaped: metric.function)(\(query.from), \(query.to), \(query.bucket.rawValue), \(query.environment),
                        \(query.bundleId), \(query.productId), \(query.storefront), \(query.currency))
                    """
            } else {
                sql = """
                    SELECT \(unescaped: select) FROM \(unescaped: metric.function)(\(query.from), \(query.to), \(query.bucket.rawValue), \(query.environment),
                        \(query.bundleId), \(query.productId), \(query.storefront))
                    """
            }
            return MetricTable(columns: metric.columns, rows: try await Self.rows(sql, columns: metric.columns.count, on: connection, logger: logger))
        }
    }

    /// The rows of `sql`, each of `columns` text cells.
    static func rows(_ sql: PostgresQuery, columns: Int, on connection: PostgresConnection, logger: Logger) async throws -> [[String?]] {
        var rows: [[String?]] = []
        for try await row in try await connection.query(sql, logger: logger) {
            let cells = row.makeRandomAccess()
            rows.append(try (0..<columns).map { try cells[$0].decode(String?.self) })
        }
        return rows
    }

    /// How many changed subscriptions one `metric_rollups_apply` call claims.
    static let rollupBatch = 2_000

    /// Applies every changed subscription to the rollups on `connection`; with `catalog`, then refreshes the product
    /// catalog from the observations they keep, and applies what a changed duration marked. Returns the count applied.
    @discardableResult
    static func catchUp(catalog: Bool, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        var applied = 0
        func drain() async throws {
            while true {
                let claimed = try await applyBatch(on: connection, logger: logger)
                applied += claimed
                if claimed == 0 { return }
            }
        }
        try await drain()
        if catalog {
            try await connection.query("SELECT refresh_product_catalog_from_rollups()", logger: logger)
            try await drain()
        }
        return applied
    }

    /// One `metric_rollups_apply` call: how many changed subscriptions and refund-request changes it applied.
    static func applyBatch(on connection: PostgresConnection, logger: Logger) async throws -> Int {
        var claimed = 0
        for try await count in try await connection.query("SELECT metric_rollups_apply(\(rollupBatch)::integer)", logger: logger).decode(Int32.self) {
            claimed = Int(count)
        }
        return claimed
    }

    /// Applies the subscriptions changed since the rollups last saw them, in transactions of `rollupBatch`
    /// subscriptions (the workers' maintenance round calls this; so does a metric read). Returns how many.
    @discardableResult
    public func applyRollups(catalog: Bool = false) async throws -> Int {
        var total = 0
        while true {
            let applied = try await client.withTransaction(logger: logger) { connection in try await Self.applyBatch(on: connection, logger: logger) }
            total += applied
            if applied == 0 { break }
        }
        if catalog {
            total += try await client.withTransaction(logger: logger) { connection in
                try await Self.catchUp(catalog: true, on: connection, logger: logger)
            }
        }
        return total
    }

    /// Builds the rollups from every stored period (`metric_rollups_rebuild`), after refreshing the catalog with a
    /// full scan. The changed set is emptied first in a transaction of its own, so that what the workers change
    /// while the build runs is marked again and applied after it. Returns the periods built.
    public func rebuildRollups(workMemory: String = "1GB") async throws -> Int64 {
        guard workMemory.allSatisfy({ $0.isASCII && ($0.isNumber || $0.isLetter) }) else { throw MetricSettingError(setting: "work_mem", value: workMemory) }
        try await client.withTransaction(logger: logger) { connection -> Void in
            try await connection.query("SELECT refresh_product_catalog()", logger: logger)
            try await connection.query("UPDATE metric_rollup_state SET built = false", logger: logger)
            try await connection.query("DELETE FROM metric_dirty_subscriptions", logger: logger)
        }
        return try await client.withTransaction(logger: logger) { connection in
            try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL work_mem = '\(workMemory)'"), logger: logger)
            var periods: Int64 = 0
            for try await count in try await connection.query("SELECT metric_rollups_rebuild()", logger: logger).decode(Int64.self) { periods = count }
            return periods
        }
    }

    /// Whether the rollups are built (a read of one row; `rollupStatus` counts what they hold).
    public func rollupsBuilt() async throws -> Bool {
        var built = false
        for try await value in try await client.query("SELECT built FROM metric_rollup_state", logger: logger).decode(Bool.self) { built = value }
        return built
    }

    /// Changed subscriptions the rollups have not applied yet.
    public func rollupsPending() async throws -> Int64 {
        var pending: Int64 = 0
        for try await value in try await client.query("SELECT count(*) FROM metric_dirty_subscriptions", logger: logger).decode(Int64.self) { pending = value }
        return pending
    }

    /// Whether the rollups are built, and how much they hold and have still to apply.
    public func rollupStatus() async throws -> MetricRollupStatus {
        let rows = try await client.query(
            """
            SELECT (SELECT built FROM metric_rollup_state), (SELECT count(*) FROM metric_dirty_subscriptions), (SELECT count(*) FROM metric_periods)
            """, logger: logger)
        for try await (built, pending, periods) in rows.decode((Bool, Int64, Int64).self) {
            return MetricRollupStatus(built: built, pending: pending, periods: periods)
        }
        return MetricRollupStatus(built: false, pending: 0, periods: 0)
    }

    /// Every metric the rollups answer, computed both ways over `query` (its product and storefront filters are
    /// ignored), after applying what changed and refreshing the catalog both ways; returns the rows that differ,
    /// and any product whose observed durations differ from a full scan's. Empty when they agree.
    public func compareRollups(_ query: MetricQuery, statementTimeoutMilliseconds: Int = 600_000) async throws -> [MetricDifference] {
        var query = query
        (query.productId, query.storefront) = (nil, nil)
        _ = try await applyRollups(catalog: true)
        _ = try await refreshProductCatalog()
        _ = try await applyRollups(catalog: false)
        var differences: [MetricDifference] = []
        for metric in SubscriptionMetric.allCases {
            let full = try await self.metric(metric, query, statementTimeoutMilliseconds: statementTimeoutMilliseconds, refreshCatalog: false, source: .full)
            let rollups = try await self.metric(metric, query, statementTimeoutMilliseconds: statementTimeoutMilliseconds, refreshCatalog: false, source: .rollups)
            for index in 0..<max(full.rows.count, rollups.rows.count) {
                let left = full.rows.indices.contains(index) ? full.rows[index] : nil
                let right = rollups.rows.indices.contains(index) ? rollups.rows[index] : nil
                if left != right { differences.append(MetricDifference(metric: metric.rawValue, full: left, rollups: right)) }
            }
        }
        let observations = try await client.query(
            """
            WITH full_scan AS (
                SELECT product_id, apple_subscription_duration(expires_date - purchase_date) AS duration, count(*) AS periods
                FROM transactions
                WHERE type = 'Auto-Renewable Subscription' AND product_id IS NOT NULL AND expires_date > purchase_date
                    AND payload->>'offerType' IS NULL AND payload->>'billingPlanType' IS DISTINCT FROM 'MONTHLY'
                    AND NOT coalesce((payload->>'isUpgraded')::boolean, false)
                GROUP BY 1, 2
            ), kept AS (SELECT product_id, duration, periods FROM metric_rollup_product_durations WHERE periods <> 0)
            SELECT coalesce(f.product_id, k.product_id), coalesce(f.duration, k.duration), f.periods::text, k.periods::text
            FROM full_scan f FULL JOIN kept k USING (product_id, duration)
            WHERE f.periods IS DISTINCT FROM k.periods ORDER BY 1, 2
            """, logger: logger)
        for try await (product, duration, full, kept) in observations.decode((String, String, String?, String?).self) {
            differences.append(MetricDifference(metric: "product-durations", full: [product, duration, full], rollups: [product, duration, kept]))
        }
        return differences
    }

    /// Fills the catalog from observed periods; returns how many products it holds observations for.
    @discardableResult
    public func refreshProductCatalog() async throws -> Int {
        var count = 0
        for try await value in try await client.query("SELECT refresh_product_catalog()", logger: logger).decode(Int.self) { count = value }
        return count
    }

    /// Sets a product's duration by hand; observation never overrides it.
    public func setProductDuration(productId: String, duration: String) async throws {
        try await client.query(
            """
            INSERT INTO product_catalog (product_id, duration, source) VALUES (\(productId), \(duration), 'manual')
            ON CONFLICT (product_id) DO UPDATE SET duration = EXCLUDED.duration, source = 'manual', updated_at = now()
            """,
            logger: logger)
    }

    /// The catalog, by product id.
    public func productCatalog() async throws -> [ProductCatalogEntry] {
        var entries: [ProductCatalogEntry] = []
        let rows = try await client.query("SELECT product_id, duration, source, observed_periods FROM product_catalog ORDER BY product_id", logger: logger)
        for try await (productId, duration, source, observed) in rows.decode((String, String, String, Int64).self) {
            entries.append(ProductCatalogEntry(productId: productId, duration: duration, source: source, observedPeriods: observed))
        }
        return entries
    }

    /// Loads `rates` in one transaction (a rate given again for the same day replaces the old one); returns the count.
    @discardableResult
    public func loadExchangeRates(_ rates: [ExchangeRate]) async throws -> Int {
        guard !rates.isEmpty else { return 0 }
        try await client.withTransaction(logger: logger) { connection -> Void in
            _ = try await connection.query(
                """
                INSERT INTO exchange_rates (currency, reporting_currency, rate_date, rate)
                SELECT c, r, d::date, v::numeric FROM unnest(\(rates.map(\.currency))::text[], \(rates.map(\.reportingCurrency))::text[],
                    \(rates.map(\.date))::text[], \(rates.map(\.rate))::text[]) AS x(c, r, d, v)
                ON CONFLICT (currency, reporting_currency, rate_date) DO UPDATE SET rate = EXCLUDED.rate, loaded_at = now()
                """,
                logger: logger)
        }
        return rates.count
    }
}
