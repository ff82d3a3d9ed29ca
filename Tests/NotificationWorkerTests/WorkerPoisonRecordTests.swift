import Foundation
import ServiceRuntime
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

/// A record PostgreSQL refuses for good must not stall the worker (nor, after `max.poll.interval.ms`, the next
/// owner): it is isolated from its batch, dead-lettered as `storeRejected`, and the rest of the batch is stored.
@Suite(
    "Worker: a record the database refuses", .serialized,
    .requiresKafkaAndPostgres)
struct WorkerPoisonRecordTests: ProcessSuite {
    @Test("a verified notification holding U+0000 (jsonb refuses it, SQLSTATE 22P05) is dead-lettered once; its batch-mates are stored")
    func nulCharacter() async throws {
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 1)
        let events = NotificationMinter.lifecycleEvents(subscriptions: 12)
        var poisoned = events[4]
        poisoned.appAccountToken = "before\u{0000}after"
        poisoned.notificationUUID = deterministicUUID(777_001)
        // A subscription of its own, so its transaction and entitlement rows (jsonb) are written.
        poisoned.originalTransactionId = "3999999999999999"
        poisoned.transactionId = "3999999999999998"
        let payloads = events.map(fixture.minter.signedNotification)
        let poison = fixture.minter.signedNotification(poisoned)
        // The poisoned record sits in the middle of what one batch will read.
        var stream = payloads
        stream.insert(poison, at: payloads.count / 2)
        try await fixture.produce(stream)
        let database = try await TestDatabase.create("poison" + UUID().uuidString.prefix(6).lowercased(), on: postgresURL)
        let group = TestServices.uniqueName("poison")
        let worker = try await fixture.startWorker(group: group, postgresURL: database).process
        #expect(try await TestDatabase.waitForLedger(database, count: Set(events.map(\.notificationUUID)).count, timeout: .seconds(60)), "the batch-mates were stored\n\(fixture.logTail(lines: 40))")
        #expect(try await fixture.waitForLag(group: group), "the worker moved past the poisoned record\n\(fixture.logTail())")
        #expect(worker.isRunning)
        await fixture.stopOneByOne([worker])
        let dead = try await fixture.deadLetters(group: group)
        #expect(dead.count == 1, "\(dead.count) dead letters")
        #expect(dead.first?.errorCode == "storeRejected" && dead.first?.errorCause == "22P05", "\(dead.map { "\($0.errorCode) \($0.errorReason)" })")
        #expect(dead.first.map { String(decoding: $0.record.value, as: UTF8.self) == poison } == true, "the payload is dead-lettered unchanged")
    }
}
