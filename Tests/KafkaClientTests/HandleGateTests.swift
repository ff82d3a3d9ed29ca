@testable import KafkaClient
import Synchronization
import Testing

@Suite("Handle gate")
struct HandleGateTests {
    @Test("close waits for the calls inside and refuses later ones")
    func closeWaits() async throws {
        let gate = HandleGate()
        let closed = Flag()
        #expect(gate.enter())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await gate.close()
                closed.value.store(true, ordering: .releasing)
            }
            try await Task.sleep(for: .milliseconds(100))
            #expect(gate.isClosed && !gate.enter(), "no new call once closing began")
            let returnedEarly = closed.value.load(ordering: .acquiring)
            #expect(!returnedEarly, "close returned while a call was still inside")
            gate.leave()
            try await group.waitForAll()
        }
        let returned = closed.value.load(ordering: .acquiring)
        #expect(returned && !gate.enter())
    }
}

final class Flag: Sendable {
    let value = Atomic<Bool>(false)
}
