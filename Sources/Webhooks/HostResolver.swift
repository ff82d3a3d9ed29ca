import AppStoreNotifications
import Foundation

/// Name resolution for webhook hosts, bounded per host: getaddrinfo cannot be cancelled and may block for as long as
/// the system's resolver waits, so each resolution runs on a thread of its own, at most one per host at a time, and
/// every attempt to a host whose resolution is under way waits for that one (up to its own deadline) instead of
/// starting another. One endpoint whose DNS never answers holds one thread and delays only its own attempts; it can no
/// longer fill a shared pool and make other endpoints' attempts time out (issue 51: they shared NIO's thread pool).
final class HostResolver: Sendable {
    typealias Answer = Result<[WebhookTarget.ResolvedAddress], WebhookTargetError>

    static let shared = HostResolver()

    /// The blocking look-up (getaddrinfo; a test's stand-in).
    let lookUp: @Sendable (String) -> Answer
    private let flights = SingleFlight<String, Answer>()

    init(lookUp: @escaping @Sendable (String) -> Answer = WebhookTarget.resolve) {
        self.lookUp = lookUp
    }

    /// Hosts whose resolution is under way now (one thread each).
    var inFlight: Int { flights.inFlight }

    /// The host's addresses: joins the resolution under way, or starts one on a new thread.
    func resolve(_ host: String) async -> Answer {
        let lookUp = lookUp
        return await flights.run(host) {
            await withCheckedContinuation { continuation in
                let thread = Thread { continuation.resume(returning: lookUp(host)) }
                thread.name = "webhook-dns"
                thread.start()
            }
        }
    }
}
