import Foundation
import Logging
import Metrics
import PipelineConfiguration
import Prometheus
import ServiceLifecycle

/// How our long-running executables start, the same for each (worker, customer-api, webhooks): `--help` prints
/// the settings, logging goes to stderr at `LOG_LEVEL`, metrics to a Prometheus registry, traces over OTLP when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is set (PipelineTracing), configuration is read
/// and the services built (a failure exits 2 with the reason, naming the variable), then one ServiceGroup runs
/// them with SIGTERM and SIGINT graceful; a service that fails exits 1, so the orchestrator replaces the process.
public enum ServiceProcess {
    /// What `build` returns: the services in start order, and what the start log line says.
    public struct Built {
        public var services: [any Service]
        public var metadata: Logger.Metadata

        public init(services: [any Service], metadata: Logger.Metadata) {
            self.services = services
            self.metadata = metadata
        }
    }

    /// On the main actor, as the executables' top-level code is: `build` is written there and runs there.
    @MainActor
    public static func run(
        name: String, help: String, build: (_ logger: Logger, _ registry: PrometheusCollectorRegistry) throws -> Built
    ) async -> Never {
        if CommandLine.arguments.dropFirst().contains(where: { $0 == "--help" || $0 == "-h" }) {
            print(help)
            print(PipelineTracing.help)
            exit(0)
        }
        // Inside a span, every line carries its trace_id and span_id (only when tracing is on: no cost otherwise).
        LoggingSystem.bootstrap(StreamLogHandler.standardError, metadataProvider: PipelineTracing.isEnabled() ? PipelineTracing.metadataProvider : nil)
        var logger = Logger(label: "appstore-\(name)")
        logger.logLevel = Logger.Level(rawValue: EnvironmentReader().string(SettingDescription.logLevel.variable, default: "info")) ?? .info
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        var built: Built
        do {
            // The span exporter runs first, so it stops last and flushes the spans the other services ended.
            let tracing = try PipelineTracing.bootstrap(serviceName: name, logger: logger)
            built = try build(logger, registry)
            if let tracing { built.services.insert(tracing, at: 0) }
        } catch {
            logger.critical("\(error)")
            exit(2)
        }
        logger.info("\(name) starting", metadata: built.metadata)
        var configuration = ServiceGroupConfiguration(
            services: built.services.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        // A service that fails (a fatal consumer error, say) cancels the group; if cancelling the others takes longer
        // than this, ServiceLifecycle ends the process with a fatal error instead of letting it hang. A fenced worker
        // was once seen not to exit after its fatal error (a CI run under load; not reproduced since in 16 tries,
        // cause not found): the orchestrator must get its non-zero exit either way.
        configuration.maximumCancellationDuration = .seconds(25)
        let group = ServiceGroup(configuration: configuration)
        do {
            try await group.run()
        } catch {
            logger.critical("\(name) stopped: \(error)")
            exit(1)
        }
        exit(0)
    }
}
