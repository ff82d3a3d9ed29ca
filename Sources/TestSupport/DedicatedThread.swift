import Foundation

/// Runs blocking work (waiting for a child process, a start-up loop with `usleep`) on a thread of its own, so it
/// never holds one of the concurrency pool's threads.
///
/// Why: on a 2-core machine the cooperative pool has two threads, and the tests run concurrently in one process
/// that also hosts in-process services (ingest, the fake App Store Server API). Two tests blocked at once in
/// `waitUntilExit` or `waitpid` (a `pipelinectl` run, `initdb`, a broker start) froze every other test's awaits:
/// fresh-clone CI on 450f5ee saw a 10 s HTTP deadline fire after 23 s.
public enum DedicatedThread {
    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = "blocking test work"
            thread.start()
        }
    }
}
