import Foundation
import Logging
import Metrics
import NotificationPipeline
import Prometheus
import ServiceLifecycle
import Webhooks

// webhooks: read configuration, bootstrap logging and metrics, build, run. Logic lives in Webhooks.
if CommandLine.arguments.dropFirst().contains(where: { $0 == "--help" || $0 == "-h" }) {
    print(WebhooksConfiguration.help)
    exit(0)
}
LoggingSystem.bootstrap(StreamLogHandler.standardError)
var logger = Logger(label: "appstore-webhooks")
logger.logLevel = Logger.Level(rawValue: EnvironmentReader().string("LOG_LEVEL", default: "info")) ?? .info

let configuration: WebhooksConfiguration
let services: WebhooksServices
let registry = PrometheusCollectorRegistry()
MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
do {
    configuration = try WebhooksConfiguration.fromEnvironment()
    services = try buildWebhooksServices(configuration: configuration, registry: registry, logger: logger)
} catch {
    logger.critical("\(error)")
    exit(2)
}
logger.info("webhooks starting", metadata: [
    "topic": "\(configuration.eventsTopic)", "group": "\(configuration.groupId)", "ops": "\(configuration.opsHost):\(configuration.opsPort)",
    "privateTargets": "\(configuration.allowPrivateTargets)",
])
let group = ServiceGroup(
    configuration: .init(services: services.services.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
do {
    try await group.run()
} catch {
    logger.critical("webhooks stopped: \(error)")
    exit(1)
}
