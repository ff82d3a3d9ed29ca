import EntitlementStore
import Foundation
import Hummingbird
import KafkaClient
import Logging
import ServiceRuntime
import PostgresNIO
import Prometheus
import ServiceLifecycle

/// The webhooks process's services, in start order (a ServiceGroup stops them in reverse: the ops server, the
/// maintenance loop, the dispatcher finishes its attempts in flight, the ingester stops polling, the consumer
/// commits and leaves the group, the database pool closes).
package struct WebhooksServices: Sendable {
    package let services: [any Service]
}

/// Builds the webhooks service: the PostgreSQL pool, a consumer of the events topic in `WEBHOOKS_GROUP_ID`, the
/// ingester (events → deliveries), the dispatcher (deliveries → signed POSTs), maintenance (gauges, pruning) and
/// the ops server (`/health/live`, `/health/ready`: PostgreSQL with the schema current and a broker reachable,
/// `/metrics`).
package func buildWebhooksServices(
    configuration: WebhooksConfiguration,
    registry: PrometheusCollectorRegistry,
    logger: Logger,
    onOpsServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) throws -> WebhooksServices {
    let postgres = PostgresClient(configuration: try configuration.postgresConfiguration(), backgroundLogger: logger)
    let consumer = try KafkaConsumer(configuration: configuration.consumerConfiguration, topics: [configuration.eventsTopic], logger: logger)
    let store = WebhookStore(client: postgres, logger: logger, erasureKey: configuration.erasureKey)
    let metrics = WebhooksMetrics(registry: registry)
    let ingester = WebhookIngester(consumer: consumer, storeTimeout: configuration.storeTimeout, store: store, metrics: metrics, logger: logger)
    let dispatcher = WebhookDispatcher(
        configuration: configuration, store: store, sender: WebhookSender(timeout: configuration.timeout, allowPrivateTargets: configuration.allowPrivateTargets),
        metrics: metrics, logger: logger)
    let maintenance = WebhookMaintenance(configuration: configuration, store: store, metrics: metrics, logger: logger)

    let entitlements = EntitlementStore(client: postgres, logger: logger)
    let database = CachedProbe(ttl: .seconds(2)) { (try? await entitlements.pendingMigrations().isEmpty) ?? false }
    let ops = OperationsRoutes.server(
        host: configuration.opsHost, port: configuration.opsPort, name: "appstore-webhooks", registry: registry, logger: logger,
        onRunning: onOpsServerRunning
    ) {
        guard await database.value() else { return "PostgreSQL did not answer, or its schema is not migrated (pipelinectl migrate)" }
        if !consumer.isBrokerReachable, !(await consumer.checkBrokerReachable()) { return "no Kafka broker reachable" }
        return nil
    }
    return WebhooksServices(services: [postgres, consumer, ingester, dispatcher, maintenance, ops])
}
