import CustomerAPI
import Foundation
import Logging
import Metrics
import NotificationPipeline
import Prometheus
import ServiceLifecycle

// customer-api: read configuration, bootstrap logging and metrics, build, run. Logic lives in CustomerAPI.
if CommandLine.arguments.dropFirst().contains(where: { $0 == "--help" || $0 == "-h" }) {
    print(CustomerAPIConfiguration.help)
    exit(0)
}
LoggingSystem.bootstrap(StreamLogHandler.standardError)
var logger = Logger(label: "appstore-customer-api")
logger.logLevel = Logger.Level(rawValue: EnvironmentReader().string("LOG_LEVEL", default: "info")) ?? .info

let configuration: CustomerAPIConfiguration
let services: CustomerAPIServices
let registry = PrometheusCollectorRegistry()
MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
do {
    configuration = try CustomerAPIConfiguration.fromEnvironment()
    services = try buildCustomerAPIServices(configuration: configuration, registry: registry, logger: logger)
} catch {
    logger.critical("\(error)")
    exit(2)
}
logger.info("customer-api listening", metadata: [
    "address": "\(configuration.host):\(configuration.port)", "ops": "\(configuration.host):\(configuration.opsPort)",
    "topic": "\(configuration.shared.topic)", "policy": "\(configuration.ownershipPolicy.rawValue)",
])
let group = ServiceGroup(
    configuration: .init(services: services.services.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
do {
    try await group.run()
} catch {
    logger.critical("customer-api stopped: \(error)")
    exit(1)
}
