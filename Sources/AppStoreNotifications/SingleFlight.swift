import Synchronization

/// One piece of work per key at a time: a caller asking while the work for the same key is under way waits for its
/// result instead of starting its own. The first caller (the leader) does the work in its own task; the others are
/// registered in the same locked step that sees the flight, so none can miss its end. Used for the online revocation
/// check of a chain (one OCSP query per chain) and for a webhook host's name resolution (one thread per host).
public final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let waiting = Mutex<[Key: [CheckedContinuation<Value?, Never>]]>([:])

    public init() {}

    /// Keys whose work is under way now.
    public var inFlight: Int { waiting.withLock { $0.count } }

    /// `work`'s value for `key`: this caller's, or that of the flight under way.
    public func run(_ key: Key, _ work: () async -> Value) async -> Value {
        // `nil` tells the leader to do the work; a follower is resumed with the leader's value.
        let joined: Value? = await withCheckedContinuation { continuation in
            let leads = waiting.withLock { waiting -> Bool in
                if waiting[key] != nil {
                    waiting[key]!.append(continuation)
                    return false
                }
                waiting[key] = []
                return true
            }
            if leads { continuation.resume(returning: nil) }
        }
        if let joined { return joined }
        let value = await work()
        for follower in waiting.withLock({ $0.removeValue(forKey: key) ?? [] }) { follower.resume(returning: value) }
        return value
    }
}
