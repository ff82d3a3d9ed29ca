import Crypto
import Synchronization

/// Remembers chains that already verified, keyed by the exact `x5c` strings.
///
/// Why: one notification carries three JWSs that share one `x5c`, and Apple rotates its leaf a few times a year,
/// so nearly every chain we see was verified a moment ago. A hit skips two P-384 signature checks and the
/// chain building, and still requires the payload's signedDate to lie inside the chain's validity window, so a
/// cached chain never vouches for a date it was not valid at. The lock guards only the dictionary; no
/// cryptography runs under it.
final class CertificateChainCache: Sendable {
    struct Entry: Sendable {
        /// The verified leaf's ES256 key.
        var leafKey: P256.Signing.PublicKey
        /// The intersection of the validity periods of leaf, intermediate and root, in milliseconds (inclusive).
        var validFrom: Int64
        var validUntil: Int64

        func covers(_ signedDate: Int64) -> Bool { validFrom <= signedDate && signedDate <= validUntil }
    }

    private let entries: BoundedCache<[String], Entry>
    /// The chain found last. Nearly every JWS carries it, and comparing the ≈4.5 KB of `x5c` text costs a fraction
    /// of hashing it for the dictionary (SipHash over the three certificates was ≈ 5 % of a warm verification).
    private let recent = Mutex<(key: [String], entry: Entry)?>(nil)

    init(capacity: Int) {
        entries = BoundedCache(capacity: capacity)
    }

    func lookup(_ key: [String]) -> Entry? {
        if let recent = recent.withLock({ $0 }), recent.key == key { return recent.entry }
        guard let entry = entries.lookup(key) else { return nil }
        recent.withLock { $0 = (key, entry) }
        return entry
    }

    func insert(_ entry: Entry, for key: [String]) {
        entries.insert(entry, for: key)
        recent.withLock { $0 = (key, entry) }
    }

    var count: Int { entries.count }
}

/// A thread-safe dictionary of at most `capacity` entries that forgets the oldest insertion when full.
/// The lock covers only the dictionary operations.
final class BoundedCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct State {
        var entries: [Key: Value] = [:]
        /// Insertion order, for evicting the oldest entry when full.
        var order: [Key] = []
    }

    private let state = Mutex(State())
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    func lookup(_ key: Key) -> Value? {
        state.withLock { $0.entries[key] }
    }

    func insert(_ value: Value, for key: Key) {
        state.withLock { state in
            if state.entries.updateValue(value, forKey: key) == nil {
                state.order.append(key)
                if state.order.count > capacity {
                    let evicted = state.order.removeFirst()
                    state.entries[evicted] = nil
                }
            }
        }
    }

    var count: Int { state.withLock { $0.entries.count } }
}
