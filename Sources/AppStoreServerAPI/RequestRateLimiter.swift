/// Keeps our calls under Apple's per-app limits by itself: a token bucket per (app, endpoint family), holding at
/// most one second's worth of requests (at least one), refilled continuously. A caller over the limit waits its
/// turn instead of earning a 429.
public actor RequestRateLimiter {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private var buckets: [String: Bucket] = [:]
    private let clock = ContinuousClock()

    public init() {}

    /// Waits until a request of family `key` may leave at `perSecond`.
    public func acquire(_ key: String, perSecond: Double) async throws {
        let wait = reserve(key, perSecond: perSecond)
        if wait > .zero { try await Task.sleep(for: wait) }
    }

    /// Takes a token now (the balance may go negative: the debt is the caller's wait) and says how long to wait.
    private func reserve(_ key: String, perSecond: Double) -> Duration {
        let now = clock.now
        let capacity = max(1, perSecond)
        var bucket = buckets[key] ?? Bucket(tokens: capacity, updated: now)
        let elapsed = now - bucket.updated
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        bucket.tokens = min(capacity, bucket.tokens + seconds * perSecond)
        bucket.updated = now
        bucket.tokens -= 1
        buckets[key] = bucket
        return bucket.tokens >= 0 ? .zero : .milliseconds(Int64((-bucket.tokens / perSecond * 1000).rounded(.up)))
    }
}
