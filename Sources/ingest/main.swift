import Foundation
import Logging
import Metrics
import NotificationPipeline
import Prometheus

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
let application = buildIngestApplication(configuration: configuration, producer: producer, registry: registry, logger: logger)
logger.info("ingest listening", metadata: ["address": "\(configuration.host):\(configuration.port)", "path": "\(configuration.notificationPath)", "topic": "\(configuration.topic)"])
try await application.runService()
