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
            services: built.services.map { .init(service: ExitAfterFailure(service: $0, logger: logger)) },
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        // A service that fails (a fatal consumer error, say) cancels the group. ExitAfterFailure ends the process
        // with status 1 if the others have not stopped 15 s after the failure; this is the last resort behind it
        // (ServiceLifecycle's fatal error, whose backtrace took more than 35 s on a loaded CI machine).
        configuration.maximumCancellationDuration = .seconds(60)
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

/// Wraps each service of a process: when one fails (not when it is cancelled, stops, or fails while the process
/// shuts down gracefully: that has its own budget), a thread of its own ends
/// the process with status 1 if it is still running `exitAfter` later. A failed service cancels the group, and the
/// others should stop at once; one that does not (a call that ignores cancellation) must not keep a process that
/// can no longer work alive and saying ready: the orchestrator replaces it only once it exits. A fenced worker
/// waited more than 25 s for its group on a loaded CI machine, and ServiceLifecycle's own limit ends in a fatal
/// error whose backtrace took longer still.
struct ExitAfterFailure: Service, CustomStringConvertible {
    let service: any Service
    let logger: Logger
    var exitAfter: Duration = .seconds(15)

    /// The wrapped service's, in ServiceLifecycle's logs.
    var description: String { String(describing: service) }

    func run() async throws {
        do {
            try await service.run()
        } catch {
            if !(error is CancellationError) && !Task.isCancelled && !Task.isShuttingDownGracefully {
                let logger = logger
                let seconds = Double(exitAfter.components.seconds) + Double(exitAfter.components.attoseconds) / 1e18
                let name = String(describing: type(of: service))
                Thread.detachNewThread {
                    Thread.sleep(forTimeInterval: seconds)
                    logger.critical("\(name) failed and the other services did not stop within \(Int(seconds)) s; exiting with status 1")
                    fflush(nil)  // every stream: the log line above is written before the process ends
                    _exit(1)
                }
            }
            throw error
        }
    }
}
