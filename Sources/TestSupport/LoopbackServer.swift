import Hummingbird
import Logging
import ServiceLifecycle

/// A router served by Hummingbird in a service group of its own, for the test servers (the fake App Store Server API,
/// the webhook receiver, the OTLP sink): started on `host:port` (0: a free port), its port known once it listens,
/// stopped gracefully.
public struct LoopbackServer: Sendable {
    public let port: Int
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    /// Serves `router` and returns once it listens; `name` is its server name (and what a failure to start names).
    public static func start(
        _ router: Router<BasicRequestContext>, name: String, host: String = "127.0.0.1", port requestedPort: Int = 0, logger: Logger
    ) async throws -> LoopbackServer {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = Application(
            router: router, configuration: .init(address: .hostname(host, port: requestedPort), serverName: name),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? requestedPort) }, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [application], logger: logger))
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw FakeAPIError(reason: "the test server \(name) did not start") }
        return LoopbackServer(port: port, group: group, task: task)
    }

    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}
