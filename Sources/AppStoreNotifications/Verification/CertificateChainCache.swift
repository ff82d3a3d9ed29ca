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

    init(capacity: Int) {
        entries = BoundedCache(capacity: capacity)
    }

    func lookup(_ key: [String]) -> Entry? { entries.lookup(key) }

    func insert(_ entry: Entry, for key: [String]) { entries.insert(entry, for: key) }

    var count: Int { entries.count }
}

/// A thread-safe dictionary of at most `capacity` entries that forgets the oldest insertion when full.
/// The lock covers only the dictionary operations.
///
/// The entry found or inserted last is compared before the dictionary is asked: nearly every look-up is for it
/// (one chain and one header sign nearly every JWS), and comparing keys of a few KB costs a fraction of hashing
/// them (SipHash over a chain's three certificates was ≈ 5 % of a warm verification).
final class BoundedCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct State {
        var entries: [Key: Value] = [:]
        /// Insertion order, for evicting the oldest entry when full.
        var order: [Key] = []
        var recent: (key: Key, value: Value)?
    }

    private let state = Mutex(State())
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    func lookup(_ key: Key) -> Value? {
        state.withLock { state in
            if let recent = state.recent, recent.key == key { return recent.value }
            guard let value = state.entries[key] else { return nil }
            state.recent = (key, value)
            return value
        }
    }

    func insert(_ value: Value, for key: Key) {
        state.withLock { state in
            if state.entries.updateValue(value, forKey: key) == nil {
                state.order.append(key)
                if state.order.count > capacity {
                    let evicted = state.order.removeFirst()
                    state.entries[evicted] = nil
                    if state.recent?.key == evicted { state.recent = nil }
                }
            }
            state.recent = (key, value)
        }
    }

    var count: Int { state.withLock { $0.entries.count } }
}
