import EntitlementStore

/// Subscription metrics (`pipelinectl metrics`, products, exchange rates): the metric functions of
/// `Migrations.metrics` over the stored transactions, the product catalog, exchange rates.
public typealias MetricsStore = DatabaseQueries<MetricsQueries>

/// Marks the metrics' queries (`MetricsStore`).
public enum MetricsQueries {}

extension EntitlementStore {
    /// The metrics' queries over this store's connections (`pipelinectl metrics`, `products`, `exchange-rates`).
    public var metrics: MetricsStore { MetricsStore(client: client, logger: logger) }
}
