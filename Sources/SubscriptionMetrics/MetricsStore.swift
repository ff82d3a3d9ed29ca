import Logging
import PostgresNIO

/// Subscription metrics (`pipelinectl metrics`, products, exchange rates): the metric functions of
/// `Migrations.metrics` over the stored transactions, the product catalog, exchange rates.
public struct MetricsStore: Sendable {
    public let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }
}
