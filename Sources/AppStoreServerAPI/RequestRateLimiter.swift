/// Keeps our calls under Apple's per-app limits by itself: a token bucket per (app, endpoint family), holding at
/// most one second's worth of requests (at least one), refilled continuously. A caller over the limit waits its
/// turn instead of earning a 429, but never longer than the caller's `maximumWait`: past that the request is
/// refused and takes no turn, so a flood of callers cannot build a queue without bound.
public actor RequestRateLimiter {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private var buckets: [String: Bucket] = [:]
    private let clock = ContinuousClock()

    public init() {}

    /// A request that would have waited longer than it may.
    public struct Refusal: Error, Sendable {
        /// How long until a request of the family could leave.
        public var wait: Duration
    }

    /// Waits until a request of family `key` may leave at `perSecond`; throws `Refusal` at once when that would
    /// take longer than `maximumWait`.
    public func acquire(_ key: String, perSecond: Double, maximumWait: Duration = .seconds(3_600)) async throws {
        let wait = reserve(key, perSecond: perSecond, maximumWait: maximumWait)
        if wait > maximumWait { throw Refusal(wait: wait) }
        if wait > .zero { try await Task.sleep(for: wait) }
    }

    /// Takes a token now (the balance may go negative: the debt is the caller's wait) and says how long to wait; a
    /// wait over `maximumWait` takes no token.
    private func reserve(_ key: String, perSecond: Double, maximumWait: Duration) -> Duration {
        let now = clock.now
        let capacity = max(1, perSecond)
        var bucket = buckets[key] ?? Bucket(tokens: capacity, updated: now)
        let elapsed = now - bucket.updated
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        bucket.tokens = min(capacity, bucket.tokens + seconds * perSecond)
        bucket.updated = now
        let wait: Duration = bucket.tokens >= 1 ? .zero : .milliseconds(Int64(((1 - bucket.tokens) / perSecond * 1000).rounded(.up)))
        if wait <= maximumWait { bucket.tokens -= 1 }
        buckets[key] = bucket
        return wait
    }
}
