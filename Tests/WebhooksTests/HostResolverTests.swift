import Dispatch
import Synchronization
import EntitlementStore
import Foundation
import NIOPosix
import Testing
@testable import Webhooks

/// Webhook name resolution bounded per endpoint (issue 51): one host whose DNS never answers must not make other
/// endpoints' attempts time out.
@Suite("Webhook host resolution, bounded per host")
struct HostResolverTests {
    /// A look-up that blocks for `stuck` until released, and answers at once for every other host.
    final class Lookups: @unchecked Sendable {
        let release = DispatchSemaphore(value: 0)
        let calls = Mutex<[String: Int]>([:])

        func lookUp(_ host: String) -> HostResolver.Answer {
            calls.withLock { $0[host, default: 0] += 1 }
            if host == "stuck.example" { release.wait() }
            return .success([WebhookTarget.ResolvedAddress(text: "203.0.113.7", addressClass: .public)])
        }
    }

    @Test("reproduced first: a shared pool of blocking look-ups, filled by one never-answering host, times out every other host")
    func sharedPoolStarves() async throws {
        let lookups = Lookups()
        let pool = NIOThreadPool(numberOfThreads: 2)
        pool.start()
        for _ in 0..<2 { Task { _ = try? await pool.runIfActive { lookups.lookUp("stuck.example") } } }
        try await Task.sleep(for: .milliseconds(100))
        let good = await WebhookTargetTests.race(deadline: .milliseconds(300)) { try await pool.runIfActive { lookups.lookUp("good.example") } }
        #expect(good == nil, "with the pool full of the stuck host, another host's look-up misses its deadline")
        for _ in 0..<3 { lookups.release.signal() }
        try await pool.shutdownGracefully()
    }

    @Test("one thread per host: twenty attempts to a stuck host make one look-up; another host resolves at once")
    func boundedPerHost() async throws {
        let lookups = Lookups()
        let resolver = HostResolver(lookUp: { lookups.lookUp($0) })
        for _ in 0..<20 {
            let answer = await WebhookTarget.resolveBeforeDeadline("stuck.example", deadline: .now + .milliseconds(50), resolver: resolver)
            guard case .failure(let error) = answer else {
                Issue.record("the stuck host resolved")
                continue
            }
            #expect(error.code == "unresolvable" && error.reason.contains("deadline"))
        }
        #expect(lookups.calls.withLock { $0["stuck.example"] } == 1, "the attempts joined the one look-up under way")
        #expect(resolver.inFlight == 1)
        let started = ContinuousClock.now
        let good = await WebhookTarget.resolveBeforeDeadline("good.example", deadline: .now + .seconds(5), resolver: resolver)
        #expect((try? good.get())?.first?.text == "203.0.113.7")
        #expect(ContinuousClock.now - started < .seconds(2), "another host does not wait behind the stuck one")
        lookups.release.signal()
        for _ in 0..<100 where resolver.inFlight > 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(resolver.inFlight == 0, "the stuck look-up's thread ended once it answered")
    }
}

enum WebhookTargetTests {
    /// `body`'s value, or nil when `deadline` passed first.
    static func race<T: Sendable>(deadline: Duration, _ body: @escaping @Sendable () async throws -> T) async -> T? {
        try? await withDeadline(deadline, "test look-up", body)
    }
}
