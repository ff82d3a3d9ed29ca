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
    public func metric(_ metric: SubscriptionMetric, _ query: MetricQuery, statementTimeoutMilliseconds: Int = 120_000, refreshCatalog: Bool = true,
                       workMemory: String = "256MB") async throws -> MetricTable {
        guard workMemory.allSatisfy({ $0.isASCII && ($0.isNumber || $0.isLetter) }) else { throw MetricSettingError(setting: "work_mem", value: workMemory) }
        let select = metric.columns.map { column in
            column.hasPrefix("bucket_") ? "to_char(\(column) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')" : "\(column)::text"
        }.joined(separator: ", ")
        return try await client.withTransaction(logger: logger) { connection in
            try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL statement_timeout = \(max(1, statementTimeoutMilliseconds))"), logger: logger)
            try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL work_mem = '\(workMemory)'"), logger: logger)
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
            var rows: [[String?]] = []
            for try await row in try await connection.query(sql, logger: logger) {
                let cells = row.makeRandomAccess()
                rows.append(try (0..<metric.columns.count).map { try cells[$0].decode(String?.self) })
            }
            return MetricTable(columns: metric.columns, rows: rows)
        }
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
