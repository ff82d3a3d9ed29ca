import Foundation
import Logging
import Metrics
import NotificationPipeline
import Prometheus
import ServiceLifecycle

// ingest: read configuration, bootstrap logging and metrics, build, run. Logic lives in NotificationPipeline.
LoggingSystem.bootstrap(StreamLogHandler.standardError)
var logger = Logger(label: "appstore-ingest")
logger.logLevel = Logger.Level(rawValue: EnvironmentReader().string("LOG_LEVEL", default: "info")) ?? .info

let configuration: IngestConfiguration
do {
    configuration = try IngestConfiguration.fromEnvironment()
} catch {
    logger.critical("\(error)")
    exit(2)
}
let registry = PrometheusCollectorRegistry()
MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
let producer = try KafkaProducerFactory.make(configuration.producerConfiguration, logger: logger)
let drain = ShutdownDrain(period: .milliseconds(configuration.shutdownDrainMilliseconds))
let application = buildIngestApplication(configuration: configuration, producer: producer, registry: registry, logger: logger, drain: drain)
logger.info("ingest listening", metadata: ["address": "\(configuration.host):\(configuration.port)", "path": "\(configuration.notificationPath)", "topic": "\(configuration.topic)"])
// The drain is listed last: on SIGTERM it is shut down first (readiness fails, the server keeps serving for the
// drain period), then the application drains its HTTP server and flushes the producer.
let group = ServiceGroup(
    configuration: .init(services: [.init(service: application), .init(service: drain)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
try await group.run()
