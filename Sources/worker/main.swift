import Foundation
import Logging
import Metrics
import NotificationPipeline
import Prometheus
import ServiceLifecycle

// worker: read configuration, bootstrap logging and metrics, build, run. Logic lives in NotificationPipeline.
LoggingSystem.bootstrap(StreamLogHandler.standardError)
var logger = Logger(label: "appstore-worker")
logger.logLevel = Logger.Level(rawValue: EnvironmentReader().string("LOG_LEVEL", default: "info")) ?? .info

let configuration: WorkerConfiguration
let services: WorkerServices
let registry = PrometheusCollectorRegistry()
MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
do {
    configuration = try WorkerConfiguration.fromEnvironment()
    services = try buildWorkerServices(configuration: configuration, registry: registry, logger: logger)
} catch {
    logger.critical("\(error)")
    exit(2)
}
logger.info("worker starting", metadata: [
    "topic": "\(configuration.topic)", "group": "\(configuration.groupId)", "deadLetterTopic": "\(configuration.deadLetterTopic)",
    "apps": "\(configuration.apps.map { $0.bundleId ?? "*" })", "ops": "\(configuration.opsHost):\(configuration.opsPort)",
])
let group = ServiceGroup(
    configuration: .init(services: services.services.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
do {
    try await group.run()
} catch {
    // A fatal consumer error (or another service's failure): exit non-zero so the orchestrator replaces us.
    logger.critical("worker stopped: \(error)")
    exit(1)
}
