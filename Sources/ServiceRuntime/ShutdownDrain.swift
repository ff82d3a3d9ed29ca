import ServiceLifecycle
import Synchronization

/// On graceful shutdown (SIGTERM of a rolling restart), fails readiness first and keeps the HTTP server serving
/// for `period` before it stops: load balancers and Kubernetes endpoints take a moment to stop sending, and a POST
/// arriving then is answered truthfully instead of refused. Listed *after* the application in the ServiceGroup,
/// so the group (which shuts services down in reverse order) drains before the server stops.
public final class ShutdownDrain: Service, Sendable {
    public let period: Duration
    private let draining = Atomic<Bool>(false)

    public init(period: Duration) {
        self.period = period
    }

    /// True from the shutdown signal on: `/health/ready` answers 503.
    public var isDraining: Bool { draining.load(ordering: .relaxed) }

    public func run() async throws {
        try? await gracefulShutdown()
        draining.store(true, ordering: .relaxed)
        try? await Task.sleep(for: period)
    }
}
