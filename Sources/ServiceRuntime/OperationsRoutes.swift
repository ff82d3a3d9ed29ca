import Hummingbird
import Logging
import Prometheus
import ServiceLifecycle

/// The routes every process serves for its orchestrator and its Prometheus.
public enum OperationsRoutes {
    public static let live = "/health/live"
    public static let ready = "/health/ready"
    public static let metrics = "/metrics"

    /// `/health/live` (200 while the process serves HTTP), `/health/ready` (200, or 503 with
    /// `{"error": "notReady", "reason": ...}` while `notReadyReason` gives one) and `/metrics` (Prometheus text).
    public static func add<Context: RequestContext>(
        to router: Router<Context>, registry: PrometheusCollectorRegistry, notReadyReason: @escaping @Sendable () async -> String?
    ) {
        router.get(RouterPath(live)) { _, _ in HTTPResponse.Status.ok }
        router.get(RouterPath(ready)) { _, _ -> Response in
            guard let reason = await notReadyReason() else { return Response(status: .ok) }
            let body = RefusalBody.json(code: "notReady", reason: reason)
            return Response(status: .serviceUnavailable, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        router.get(RouterPath(metrics)) { _, _ -> Response in
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
        }
    }

    /// A service's ops server: these routes on a port of their own, so probes and scrapes never queue behind the
    /// service's clients. `onRunning` gets the bound port (the configured one, or the one picked for port 0).
    public static func server(
        host: String, port: Int, name: String, registry: PrometheusCollectorRegistry, logger: Logger,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }, notReadyReason: @escaping @Sendable () async -> String?
    ) -> some Service {
        let router = Router()
        add(to: router, registry: registry, notReadyReason: notReadyReason)
        return Application(
            router: router, configuration: .init(address: .hostname(host, port: port), serverName: name),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) }, logger: logger)
    }
}
