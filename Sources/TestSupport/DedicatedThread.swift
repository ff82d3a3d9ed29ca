import Foundation

/// Runs blocking work (waiting for a child process, a start-up loop with `usleep`) on a thread of its own, so it
/// never holds one of the concurrency pool's threads.
///
/// Why: on a 2-core machine the cooperative pool has two threads, and the tests run concurrently in one process
/// that also hosts in-process services (ingest, the fake App Store Server API). Two tests blocked at once in
/// `waitUntilExit` or `waitpid` (a `pipelinectl` run, `initdb`, a broker start) hold back every other test's awaits;
/// the likely cause of a 10 s HTTP deadline that resumed its test after 23 s (fresh-clone CI on 8ca3ccf).
public enum DedicatedThread {
    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = "blocking test work"
            thread.start()
        }
    }
}
