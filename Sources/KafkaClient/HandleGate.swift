import Synchronization

/// The one place calls that use a librdkafka handle outside its serial queue pass through, and that `close`
/// waits on: a call either enters before the gate closes (and the handle outlives it) or is refused. Without it,
/// a ServiceGroup cancelled by another service's failure could destroy the handle under a `produce` or a
/// `storeOffsets` that had just checked `closed`.
final class HandleGate: Sendable {
    /// Calls inside, and whether the gate is closed (the sign bit).
    private let state = Atomic<Int>(0)
    private static let closedFlag = Int.min

    /// True when the caller may use the handle; it must call `leave()` afterwards.
    func enter() -> Bool {
        let after = state.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
        if after < 0 {  // closed
            state.wrappingSubtract(1, ordering: .acquiringAndReleasing)
            return false
        }
        return true
    }

    func leave() {
        state.wrappingSubtract(1, ordering: .acquiringAndReleasing)
    }

    var isClosed: Bool { state.load(ordering: .acquiring) < 0 }

    /// Refuses new calls and waits until the ones inside have left (they are short: a queue or a store call).
    func close() async {
        while true {
            let current = state.load(ordering: .acquiring)
            if current < 0 { break }
            if state.compareExchange(expected: current, desired: current | Self.closedFlag, ordering: .acquiringAndReleasing).exchanged { break }
        }
        while state.load(ordering: .acquiring) != Self.closedFlag {
            try? await Task.sleep(for: .milliseconds(1))
        }
    }
}
