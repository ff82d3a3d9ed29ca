import Logging
import PostgresNIO

/// Subscription metrics (`pipelinectl metrics`, products, exchange rates): the metric functions of
/// `Migrations.metrics` over the stored transactions, the product catalog, exchange rates.
public struct MetricsStore: Sendable {
    public let client: PostgresClient
    let logger: Logger
}

extension EntitlementStore {
    /// The metrics queries over this store's connections (`pipelinectl metrics` opens one store for a command).
    public var metrics: MetricsStore { MetricsStore(client: client, logger: logger) }
}
