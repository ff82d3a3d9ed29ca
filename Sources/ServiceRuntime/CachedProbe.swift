import Synchronization

/// A yes/no probe whose answer is reused for `ttl`: one caller at a time runs the probe, callers arriving while
/// it runs wait for its answer. Readiness endpoints use it so that their callers cannot turn into load on what
/// they probe.
public final class CachedProbe: Sendable {
    private struct State {
        var answer = false
        var answeredAt: ContinuousClock.Instant?
        var running = false
        var waiters: [CheckedContinuation<Bool, Never>] = []
    }

    private let ttl: Duration
    private let probe: @Sendable () async -> Bool
    private let state = Mutex(State())

    public init(ttl: Duration, probe: @escaping @Sendable () async -> Bool) {
        self.ttl = ttl
        self.probe = probe
    }

    /// The last answer while it is fresh, the running probe's answer, or a new probe's.
    public func value() async -> Bool {
        enum Plan { case cached(Bool), wait, probe }
        let now = ContinuousClock.now
        let plan: Plan = state.withLock { state in
            if let at = state.answeredAt, now - at < ttl { return .cached(state.answer) }
            if state.running { return .wait }
            state.running = true
            return .probe
        }
        switch plan {
        case .cached(let answer):
            return answer
        case .wait:
            return await withCheckedContinuation { continuation in
                let answered: Bool? = state.withLock { state in
                    if state.running {
                        state.waiters.append(continuation)
                        return nil
                    }
                    return state.answer
                }
                if let answered { continuation.resume(returning: answered) }
            }
        case .probe:
            let answer = await probe()
            let waiters = state.withLock { state in
                state.answer = answer
                state.answeredAt = ContinuousClock.now
                state.running = false
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: answer) }
            return answer
        }
    }
}
