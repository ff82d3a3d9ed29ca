import AppStoreNotifications
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import KafkaClient
import Logging
import NotificationRecords
import Prometheus
import ServiceLifecycle
import ServiceRuntime
import Tracing

/// The ingest process's services, in start order: the application (its HTTP server and its producer) and the
/// drain. The drain is last, so SIGTERM reaches it first: readiness fails while the server keeps serving for the
/// drain period, then the application drains its HTTP server and flushes the producer.
package func buildIngestServices(configuration: IngestConfiguration, registry: PrometheusCollectorRegistry, logger: Logger) throws -> [any Service] {
    let producer = try KafkaProducer(configuration: configuration.producerConfiguration, logger: logger)
    let drain = ShutdownDrain(period: configuration.shutdownDrain)
    return [buildIngestApplication(configuration: configuration, producer: producer, registry: registry, logger: logger, drain: drain), drain]
}

/// Builds the ingest HTTP application: Apple's POST → shape check → Kafka (acks=all) → 200 only once the broker
/// acknowledged. Runs `producer` as one of its services, so a graceful shutdown first drains the HTTP server
/// (in-flight requests still get their true answer) and then flushes the producer.
package func buildIngestApplication(
    configuration: IngestConfiguration,
    producer: KafkaProducer,
    registry: PrometheusCollectorRegistry,
    logger: Logger,
    drain: ShutdownDrain? = nil,
    onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) -> some ApplicationProtocol {
    let router = Router()
    let metrics = IngestMetrics(registry: registry)
    let handler = NotificationIngestHandler(configuration: configuration, producer: producer, metrics: metrics, logger: logger)

    var paths: [(String, String?)] = [(configuration.notificationPath, nil)]
    for (path, environment) in configuration.environmentPaths.sorted(by: { $0.key < $1.key }) { paths.append((path, environment)) }
    // Apple's POST starts a trace (or continues the request's `traceparent`); the ops routes stay out of tracing.
    let notifications = router.group().add(middleware: RouteTracingMiddleware())
    for (path, environment) in paths {
        notifications.post(RouterPath(path)) { request, _ in try await handler.handle(request, environmentHint: environment) }
        for method in [HTTPRequest.Method.get, .put, .delete, .patch, .head, .options, .trace, HTTPRequest.Method("PROPFIND")!] {
            notifications.on(RouterPath(path), method: method) { _, _ in
                handler.refuse(.methodNotAllowed, code: "methodNotAllowed", reason: "only POST is accepted here", extraHeaders: [.allow: "POST"])
            }
        }
    }
    // Ready only while a broker answers: a load balancer then stops sending us what we could not store. The
    // probe's answer is reused for a short while, so probes (or a flood of them) cannot load the brokers.
    let readiness = CachedProbe(ttl: configuration.readinessCache) {
        await producer.checkBrokerReachable(timeoutMilliseconds: 1_000)
    }
    OperationsRoutes.add(to: router, registry: registry) {
        if drain?.isDraining == true { return "shutting down (draining before the server stops)" }
        return await readiness.value() ? nil : "no Kafka broker answered"
    }
    let limits = HTTPConnectionLimits(
        idleTimeout: configuration.idleTimeout, requestTimeout: configuration.requestTimeout,
        maximumBodyBytes: configuration.maximumBodyBytes)
    return Application(
        router: router,
        server: GuardedHTTP1Channel.builder(limits: limits) { status, code in metrics.request(status: status, error: code) },
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port), serverName: "appstore-ingest",
            availableConnectionsDelegate: MaximumAvailableConnections(configuration.maximumConnections)),
        services: [producer],
        onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? configuration.port) },
        logger: logger)
}

/// The one request ingest cares about.
struct NotificationIngestHandler: Sendable {
    let configuration: IngestConfiguration
    let producer: KafkaProducer
    let metrics: IngestMetrics
    let logger: Logger

    func handle(_ request: Request, environmentHint: String?) async throws -> Response {
        metrics.inFlight.increment()
        defer { metrics.inFlight.decrement() }
        let requestId = UUID().uuidString.lowercased()
        var logger = logger
        logger[metadataKey: "request_id"] = "\(requestId)"

        if let contentType = request.headers[.contentType], !Self.isJSON(contentType) {
            return refuse(.unsupportedMediaType, code: "unsupportedMediaType", reason: "Content-Type must be application/json", requestId: requestId, logger: logger)
        }
        // Read at most one byte past the limit: enough to know the body is too large without buffering it.
        var body: [UInt8] = []
        var tooLarge = false
        for try await chunk in request.body {
            chunk.withUnsafeReadableBytes { body.append(contentsOf: $0) }  // contiguous copy, not byte by byte
            if body.count > configuration.maximumBodyBytes {
                tooLarge = true
                break
            }
        }
        metrics.requestBytes.increment(by: Int64(body.count))
        let signedPayload: String
        do throws(RequestBodyError) {
            if tooLarge { throw RequestBodyError.bodyTooLarge(size: body.count, limit: configuration.maximumBodyBytes) }
            signedPayload = try ResponseBodyV2.parse(body: body, maximumBytes: configuration.maximumBodyBytes).signedPayload
            try ResponseBodyV2.checkCompactJWSShape(signedPayload)
        } catch {
            // Refused before the body was read to its end: close the connection rather than drain megabytes.
            let close: HTTPFields = tooLarge ? [.connection: "close"] : [:]
            return refuse(.badRequest, code: error.code, reason: error.reason, requestId: requestId, logger: logger, extraHeaders: close)
        }

        let receivedAt = NotificationRecord.now()
        // The record carries the send span's context (`traceparent`): the worker continues this trace.
        let span = startSpan("send \(configuration.topic)", ofKind: .producer)
        defer { span.end() }
        span.attributes.messaging(operation: "send", destination: configuration.topic)
        let record = NotificationRecord.ingested(
            signedPayload: signedPayload, topic: configuration.topic, receivedAt: receivedAt, instanceId: configuration.instanceId,
            requestId: requestId, environmentHint: environmentHint, context: span.context)

        // Once produced, the record is awaited to the end even if the client went away: we never answer 200
        // without the record, and a record whose answer was lost is retried by Apple and deduplicated downstream.
        let started = ContinuousClock.now
        do {
            let report = try await producer.sendAndAwait(record)
            span.attributes.messaging(partition: report.partition, offset: report.offset)
            // An acknowledgement without an offset is the broker saying "duplicate of a send I already have":
            // right for Kafka after an internal retry, but a broker that lost the record and kept its sequence
            // state answers the same (tansu after kill -9, found by a chaos run). A 200 must rest on proof, so
            // this one is refused: Apple retries, the retry is a new record, and the worker drops the duplicate.
            guard report.offset >= 0 else {
                logger.warning("the broker acknowledged without an offset; answering 503 so Apple retries", metadata: ["partition": "\(report.partition)"])
                return refuse(
                    .serviceUnavailable, code: "unprovenAck",
                    reason: "the broker acknowledged the notification without an offset, so it is not proven stored; retry later", requestId: requestId,
                    logger: nil, extraHeaders: [.retryAfter: String(configuration.retryAfterSeconds)])
            }
            metrics.produceLatency.record(ContinuousClock.now - started)
            metrics.request(status: 200)
            logger.debug("accepted", metadata: ["partition": "\(report.partition)", "offset": "\(report.offset)", "bytes": "\(body.count)"])
            return Response(status: .ok, headers: [.init("X-Request-Id")!: requestId])
        } catch {
            span.recordError(error)
            logger.warning("not stored, answering 503 so Apple retries: \(error)")
            return refuse(
                .serviceUnavailable, code: "notStored", reason: "the notification could not be stored (\(error.name)); retry later",
                requestId: requestId, logger: nil, extraHeaders: [.retryAfter: String(configuration.retryAfterSeconds)])
        }
    }

    /// A JSON refusal `{"error": code, "reason": text}`.
    func refuse(
        _ status: HTTPResponse.Status, code: String, reason: String, requestId: String? = nil, logger: Logger? = nil,
        extraHeaders: HTTPFields = [:], count: Bool = true
    ) -> Response {
        if count { metrics.request(status: status.code, error: code) }
        logger?.debug("refused", metadata: ["status": "\(status.code)", "error": "\(code)"])
        var headers = extraHeaders
        headers[.contentType] = "application/json"
        if let requestId { headers[HTTPField.Name("X-Request-Id")!] = requestId }
        let body = RefusalBody.json(code: code, reason: reason)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func isJSON(_ contentType: String) -> Bool {
        let mediaType = contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        return mediaType == "application/json" || (mediaType.hasPrefix("application/") && mediaType.hasSuffix("+json"))
    }
}
