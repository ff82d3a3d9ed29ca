import Synchronization

/// A step that did not finish in time (the database unreachable, its pool waiting for a connection, a query on a
/// connection the server dropped): transient, the caller retries.
public struct StepTimedOut: Error, CustomStringConvertible {
    public var step: String
    public var limit: Duration
    public var description: String { "\(step) took longer than \(limit) (database unreachable?)" }
}

/// `body`'s result, or `StepTimedOut` after `limit`. Returns at the deadline even if `body` ignores cancellation:
/// a PostgresNIO query on a connection that the server dropped (an immediate shutdown) can wait for good, and a
/// task that waits for good stops whatever loop awaits it (the worker's batches, the events relay's rounds).
/// `body` is cancelled and left to finish on its own; callers use this only for steps that are safe to repeat.
public func withDeadline<T: Sendable>(_ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = DeadlineRace<T>()
    return try await withCheckedThrowingContinuation { continuation in
        race.continuation.withLock { $0 = continuation }
        let work = Task {
            let result: Result<T, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            race.continuation.withLock { $0.take() }?.resume(with: result)
            race.timer.withLock { $0 }?.cancel()
        }
        let timer = Task {
            try? await Task.sleep(for: limit)
            guard !Task.isCancelled, let continuation = race.continuation.withLock({ $0.take() }) else { return }
            work.cancel()
            continuation.resume(throwing: StepTimedOut(step: what, limit: limit))
        }
        race.timer.withLock { $0 = timer }
    }
}

/// Who answers first in `withDeadline`: the work or the timer.
private final class DeadlineRace<T: Sendable>: Sendable {
    let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)
    let timer = Mutex<Task<Void, Never>?>(nil)
}
