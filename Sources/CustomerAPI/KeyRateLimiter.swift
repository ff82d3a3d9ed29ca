import Synchronization

/// A token bucket per API key: `rate` requests a second, bursts of `burst`. A request over it is refused at once
/// (429 with `Retry-After`), never queued, so one greedy key costs the service a dictionary look-up per request
/// and slows no other key.
final class KeyRateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    let rate: Double
    let burst: Double
    private let buckets = Mutex<[String: Bucket]>([:])

    init(rate: Double, burst: Int) {
        self.rate = rate
        self.burst = Double(burst)
    }

    /// Gives back a token taken for `key` (an attempt that proved to be a known key's).
    func refund(key: String) {
        guard rate > 0 else { return }
        buckets.withLock { buckets in
            if var bucket = buckets[key] {
                bucket.tokens = min(burst, bucket.tokens + 1)
                buckets[key] = bucket
            }
        }
    }

    /// Takes a token for `key`; nil when the request may go on, else the seconds to wait (at least 1).
    func refusal(key: String, now: ContinuousClock.Instant = .now) -> Int? {
        guard rate > 0 else { return nil }
        return buckets.withLock { buckets in
            if buckets.count > 100_000 { buckets.removeAll() }  // keys are few; this only bounds memory
            var bucket = buckets[key] ?? Bucket(tokens: burst, updated: now)
            let elapsed = now - bucket.updated
            bucket.tokens = min(burst, bucket.tokens + (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18) * rate)
            bucket.updated = now
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                buckets[key] = bucket
                return nil
            }
            buckets[key] = bucket
            return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        }
    }
}

/// Apple's answers to Look Up Order ID, reused for a while: an order's transactions change rarely, and a backend
/// that looks one order up in a loop must not spend the app's quota at Apple.
final class OrderLookupCache: Sendable {
    private let ttl: Duration
    private let entries = Mutex<[String: (signed: [String], read: ContinuousClock.Instant)]>([:])

    init(ttl: Duration) {
        self.ttl = ttl
    }

    func signedTransactions(bundleId: String, orderId: String, load: () async throws -> [String]) async throws -> [String] {
        let key = bundleId + "\u{0}" + orderId
        let now = ContinuousClock.now
        if ttl > .zero, let entry = entries.withLock({ $0[key] }), now - entry.read < ttl { return entry.signed }
        let signed = try await load()
        entries.withLock { entries in
            if entries.count > 10_000 { entries.removeAll() }
            entries[key] = (signed, now)
        }
        return signed
    }
}
