import EntitlementStore
import Testing

@Suite("withDeadline: a step that never answers cannot hold its caller")
struct DeadlineTests {
    @Test("a body that never resumes (as a query on a dropped connection can) ends in StepTimedOut at the deadline", .timeLimit(.minutes(1)))
    func neverAnswering() async throws {
        let started = ContinuousClock.now
        let error = await #expect(throws: StepTimedOut.self) {
            try await withDeadline(.milliseconds(200), "a step that hangs") {
                // Ignores cancellation and never resumes.
                await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
            }
        }
        #expect(error?.step == "a step that hangs")
        #expect(error?.description.contains("a step that hangs took longer than") == true)
        #expect(ContinuousClock.now - started >= .milliseconds(200))
    }

    @Test("a body that answers in time gives its value or its own error")
    func answering() async throws {
        let value = try await withDeadline(.seconds(10), "a quick step") { 42 }
        #expect(value == 42)
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await withDeadline(.seconds(10), "a refused step") { throw Refused() }
        }
    }
}
