import Foundation
import Hummingbird
import Logging
import Synchronization

/// An OTLP/HTTP trace endpoint on loopback that reads and drops what it gets, counting requests and bytes: what a
/// fast collector costs an exporter, for worker-bench's tracing runs (scripts/otlp_receiver.py parses spans; this
/// one only answers, so its own CPU stays out of the figures). Answers as the specification says: 200,
/// `application/x-protobuf`, an empty `ExportTraceServiceResponse` (zero bytes).
public final class OTLPSink: Sendable {
    private let counts = Mutex((requests: 0, bytes: 0))
    private let server = Mutex<LoopbackServer?>(nil)

    public init() {}

    public var requests: Int { counts.withLock { $0.requests } }
    public var bytes: Int { counts.withLock { $0.bytes } }

    /// Starts on a free port of 127.0.0.1 and returns it.
    public func start() async throws -> Int {
        let logger = quietLogger("otlp-sink")
        let router = Router()
        router.post("/v1/traces") { request, _ in
            var size = 0
            for try await chunk in request.body { size += chunk.readableBytes }
            self.counts.withLock { $0.requests += 1; $0.bytes += size }
            return Response(status: .ok, headers: [.contentType: "application/x-protobuf", .contentLength: "0"])
        }
        let started = try await LoopbackServer.start(router, name: "otlp-sink", logger: logger)
        server.withLock { $0 = started }
        return started.port
    }

    public func stop() async {
        await server.withLock { $0 }?.stop()
    }
}
