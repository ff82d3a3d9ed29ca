import Synchronization

/// The budget's own reads and writes of PostgreSQL end within a limit: a lease whose pool has stopped, or a primary
/// that does not answer, fails the call that waits for it (an error its caller reports) instead of holding it, and
/// every call behind it, for ever. (A test once hung on a lease whose pool it had stopped.) The work left behind runs
/// to its end or to its own failure; its answer is dropped.
enum BudgetDeadline {
    static let defaultLimit: Duration = .seconds(10)

    static func within<T: Sendable>(_ what: String, limit: Duration = defaultLimit, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let race = Race<T>()
        return try await withCheckedThrowingContinuation { continuation in
            race.continuation.withLock { $0 = continuation }
            let work = Task {
                do {
                    let value = try await body()
                    race.finish(.success(value))
                } catch {
                    race.finish(.failure(error))
                }
            }
            Task {
                try? await Task.sleep(for: limit)
                if race.finish(.failure(SharedBudgetError(reason: "\(what) took longer than \(limit) (is PostgreSQL answering?)"))) { work.cancel() }
            }
        }
    }

    final class Race<T: Sendable>: Sendable {
        let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)

        /// Resumes the waiter with `result` unless another result came first; true when this one did.
        @discardableResult
        func finish(_ result: Result<T, any Error>) -> Bool {
            guard let continuation = continuation.withLock({ $0.take() }) else { return false }
            continuation.resume(with: result)
            return true
        }
    }
}
