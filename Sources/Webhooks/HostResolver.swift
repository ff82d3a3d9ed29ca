import Foundation
import Synchronization

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
    private let waiting = Mutex<[String: [CheckedContinuation<Answer, Never>]]>([:])

    init(lookUp: @escaping @Sendable (String) -> Answer = WebhookTarget.resolve) {
        self.lookUp = lookUp
    }

    /// Hosts whose resolution is under way now (one thread each).
    var inFlight: Int { waiting.withLock { $0.count } }

    /// The host's addresses: joins the resolution under way, or starts one on a new thread.
    func resolve(_ host: String) async -> Answer {
        await withCheckedContinuation { continuation in
            let first = waiting.withLock { waiting -> Bool in
                if waiting[host] != nil {
                    waiting[host]!.append(continuation)
                    return false
                }
                waiting[host] = [continuation]
                return true
            }
            guard first else { return }
            let lookUp = lookUp
            let thread = Thread { [self] in
                let answer = lookUp(host)
                for waiter in waiting.withLock({ $0.removeValue(forKey: host) ?? [] }) { waiter.resume(returning: answer) }
            }
            thread.name = "webhook-dns"
            thread.start()
        }
    }
}
