import Foundation
import Instrumentation
import Logging
import Metrics
import OTel
import PipelineConfiguration
import ServiceLifecycle
import Tracing

/// Tracing for every process, configured only by OpenTelemetry's standard variables. Off (the no-op tracer, nothing
/// injected or extracted, nothing exported) unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set. When on: OTLP/HTTP with protobuf (swift-otel), batched, bounded, and
/// dropped when the exporter cannot keep up (counted in `tracing_spans_dropped_total`), so a trace receiver that is
/// down or slow never slows the pipeline. Metrics stay on Prometheus and logs on our own handler: only traces go out.
public enum PipelineTracing {
    /// The standard variables this reads (and swift-otel reads on its own): listed in each service's `--help`.
    public static let variables = [
        "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES",
    ]

    /// What every service's `--help` adds.
    public static let help = """
        Tracing (docs/tracing.md), OpenTelemetry's standard variables:
          OTEL_EXPORTER_OTLP_ENDPOINT       the collector's OTLP/HTTP address (http://collector:4318); unset: tracing off
          OTEL_EXPORTER_OTLP_PROTOCOL       http/protobuf (default)
          OTEL_SERVICE_NAME                 default: the executable's name
          OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG  default parentbased_traceidratio, 1.0
          OTEL_RESOURCE_ATTRIBUTES          e.g. deployment.environment=production
        """

    /// Whether these variables turn tracing on.
    public static func isEnabled(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        let reader = EnvironmentReader(environment)
        if reader.optionalString("OTEL_SDK_DISABLED")?.lowercased() == "true" { return false }
        return reader.optionalString("OTEL_EXPORTER_OTLP_ENDPOINT") != nil || reader.optionalString("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != nil
    }

    /// The log metadata of the current span (`trace_id`, `span_id`), for `LoggingSystem.bootstrap`: every log line
    /// written inside a span carries them.
    public static let metadataProvider: Logger.MetadataProvider = OTel.makeLoggingMetadataProvider()

    /// Bootstraps the tracer and returns the service that exports its spans (to run first in the process's group, so
    /// it stops last and flushes what the others ended), or nil when tracing is off. Call once, after metrics.
    public static func bootstrap(serviceName: String, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> (any Service)? {
        guard isEnabled(environment) else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = serviceName
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        // The default: follow the caller's decision, sample new traces at OTEL_TRACES_SAMPLER_ARG (1.0 unset).
        configuration.traces.sampler = .parentBasedTraceIDRatio
        configuration.propagators = [.traceContext]
        configuration.diagnosticLogger = .custom(Logger(label: logger.label + ".tracing") { label in
            SpanLossCounter(wrapping: StreamLogHandler.standardError(label: label, metadataProvider: nil))
        })
        configuration.diagnosticLogLevel = .warning
        let (tracer, service) = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(tracer)
        return service
    }
}

/// Counts the spans swift-otel gives up on, from the two warnings its batch processor writes: a full queue (the
/// receiver is slower than we make spans) and a failed export (the receiver is down or refused the batch). Its
/// processor keeps these counts to itself; these lines are the only place it says them.
struct SpanLossCounter: LogHandler {
    private var handler: any LogHandler
    private static let dropped = Counter(label: "tracing_spans_dropped_total", dimensions: [("reason", "queue_full")])
    private static let failed = Counter(label: "tracing_spans_dropped_total", dimensions: [("reason", "export_failed")])

    init(wrapping handler: any LogHandler) { self.handler = handler }

    var metadata: Logger.Metadata {
        get { handler.metadata }
        set { handler.metadata = newValue }
    }
    var logLevel: Logger.Level {
        get { handler.logLevel }
        set { handler.logLevel = newValue }
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { handler[metadataKey: key] }
        set { handler[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = handler.metadata.merging(event.metadata ?? [:]) { $1 }
        if let count = merged["dropped_count"].flatMap({ Int64("\($0)") }) {
            Self.dropped.increment(by: count)
        } else if event.message.description.hasPrefix("Failed to export batch"), let count = merged["batch_size"].flatMap({ Int64("\($0)") }) {
            Self.failed.increment(by: count)
        }
        handler.log(event: event)
    }
}

/// The attributes our spans carry, by OpenTelemetry's semantic conventions (messaging, database), and the
/// notification's own (`appstore.*`): identifiers and outcomes only, never a signed payload or a secret.
extension SpanAttributes {
    /// A Kafka hop: `send`, `receive` or `process` on `destination`.
    public mutating func messaging(operation: String, destination: String, consumerGroup: String? = nil) {
        self["messaging.system"] = "kafka"
        self["messaging.operation.type"] = operation
        self["messaging.destination.name"] = destination
        if let consumerGroup { self["messaging.consumer.group.name"] = consumerGroup }
    }

    /// Where the record is (or was acknowledged).
    public mutating func messaging(partition: Int32, offset: Int64) {
        self["messaging.destination.partition.id"] = String(partition)
        self["messaging.kafka.offset"] = Int(offset)
    }

    /// A PostgreSQL transaction: `operation` names what it does (e.g. `apply notifications`).
    public mutating func database(operation: String, rows: Int? = nil) {
        self["db.system.name"] = "postgresql"
        self["db.operation.name"] = operation
        if let rows { self["db.operation.batch.size"] = rows }
    }
}

extension PipelineTracing {
    /// Whether a tracer is bootstrapped in this process: work that only feeds spans (extracting contexts, building
    /// links) is skipped without one, so tracing off costs nothing.
    public static var isTracing: Bool { !(InstrumentationSystem.tracer is NoOpTracer) }

    /// W3C Trace Context's carrier key (and HTTP header), as every carrier names it.
    public static let traceparentHeader = "traceparent"

    /// The W3C `traceparent` of `context`, when it carries a span (with tracing on).
    public static func traceparent(of context: ServiceContext) -> String? {
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(context, into: &carrier, using: DictionaryInjector())
        return carrier[traceparentHeader]
    }

    /// The context a stored `traceparent` names (the top level when it is nil or tracing is off).
    public static func context(ofTraceparent traceparent: String?) -> ServiceContext {
        var context = ServiceContext.topLevel
        guard let traceparent else { return context }
        InstrumentationSystem.instrument.extract([traceparentHeader: traceparent], into: &context, using: DictionaryExtractor())
        return context
    }
}

struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}

struct DictionaryExtractor: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}

extension PipelineTracing {
    /// Runs a command (`pipelinectl backfill`, say) as the root span of a trace of its own, when tracing is on: what
    /// it sends to the notifications topic carries that trace, so its records' handling joins it. The exporter runs
    /// beside the command and is flushed before this returns. Without tracing, just `body`.
    public static func tracedCommand<Result: Sendable>(
        _ name: String, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment,
        _ body: () async throws -> Result
    ) async throws -> Result {
        guard let exporter = try bootstrap(serviceName: environment["OTEL_SERVICE_NAME"] ?? "pipelinectl", logger: logger, environment: environment) else {
            return try await body()
        }
        let group = ServiceGroup(configuration: .init(services: [exporter], logger: logger))
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let result: Result
            do {
                result = try await withSpan(name, ofKind: .internal) { _ in try await body() }
            } catch {
                await group.triggerGracefulShutdown()
                try? await tasks.waitForAll()
                throw error
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        }
    }
}
