import EntitlementStore
import Foundation
@testable import KafkaClient
import Logging
import NotificationRecords
@testable import NotificationWorker
import Prometheus
import Synchronization
import TestSigning
import Testing

/// The batch writer's phases over in-memory doubles: no broker, no PostgreSQL, seconds. The process tests
/// (WorkerProcessTests, WorkerPoisonRecordTests) remain the integration tier over the real ones.
@Suite("Batch writer: bisection, dead-letter idempotence, suppression (in memory)")
struct BatchWriterTests: MintedSuite {

    /// A store in memory: refuses (for good) any batch holding a notification whose UUID is in `refused`, and
    /// remembers what each committed batch held.
    final class MemoryStore: BatchStore, @unchecked Sendable {
        let state = Mutex(State())
        struct State {
            var refused: Set<String> = []
            var erased: Set<RecordPosition> = []
            var recordedDeadLetters: Set<RecordPosition> = []
            var claims: [RecordPosition: RecordPosition] = [:]
            var committed: [[String]] = []
            var probes = 0
            var storeCalls = 0
        }

        var screensErasures: Bool { true }

        func erasedClaims(_ records: [DeadLetteredRecord]) async throws -> Set<RecordPosition> {
            state.withLock { state in Set(records.map(\.position)).intersection(state.erased) }
        }

        /// Like the store's: what a committed batch recorded or a claim holds is already sent; claims are kept.
        func withDeadLetterClaim<Published: Sendable>(
            _ positions: [RecordPosition],
            publish: (_ alreadySent: [RecordPosition: RecordPosition?]) async throws -> (Published, claims: [RecordPosition: RecordPosition])
        ) async throws -> (alreadySent: [RecordPosition: RecordPosition?], published: Published) {
            let alreadySent = state.withLock { state in
                var sent: [RecordPosition: RecordPosition?] = [:]
                for position in positions {
                    if let claim = state.claims[position] { sent[position] = .some(claim) } else if state.recordedDeadLetters.contains(position) { sent[position] = .some(nil) }
                }
                return sent
            }
            let (published, claims) = try await publish(alreadySent)
            state.withLock { $0.claims.merge(claims) { old, _ in old } }
            return (alreadySent, published)
        }

        func store(_ records: [StoredNotification], deadLettered: [DeadLetteredRecord]) async throws -> BatchOutcome {
            try state.withLock { state in
                state.storeCalls += 1
                if records.contains(where: { state.refused.contains($0.verified.payload.notificationUUID ?? "") }) {
                    throw DataRefused(sqlState: "22P05", message: "unsupported Unicode escape sequence")
                }
                state.committed.append(records.map { $0.verified.payload.notificationUUID ?? "" })
                state.recordedDeadLetters.formUnion(deadLettered.map(\.position))
                var outcome = BatchOutcome()
                outcome.applied = records.count
                return outcome
            }
        }

        func probe(_ records: [StoredNotification]) async throws {
            try state.withLock { state in
                state.probes += 1
                if records.contains(where: { state.refused.contains($0.verified.payload.notificationUUID ?? "") }) {
                    throw DataRefused(sqlState: "22P05", message: "unsupported Unicode escape sequence")
                }
            }
        }
    }

    /// A dead-letter topic in memory: acknowledges every send (at the next offset), except the first send of each
    /// value in `failOnce`.
    final class MemorySink: DeadLetterSink, @unchecked Sendable {
        let state = Mutex((sent: [KafkaProducerMessage](), failOnce: Set<[UInt8]>()))

        func sendAndAwait(_ message: KafkaProducerMessage) async throws -> KafkaDeliveryReport {
            try state.withLock { state in
                if state.failOnce.remove(message.value) != nil { throw DeadLetterNotAcknowledged(count: 1) }
                state.sent.append(message)
                return KafkaDeliveryReport(topic: message.topic, partition: 0, offset: Int64(state.sent.count - 1))
            }
        }

        var sent: [KafkaProducerMessage] { state.withLock { $0.sent } }
    }

    func writer(_ store: MemoryStore, _ sink: MemorySink) -> BatchWriter<MemoryStore, MemorySink> {
        var configuration = WorkerConfiguration(kafka: KafkaClientConfigurationValues(bootstrapServers: [], clientId: "batch-writer-tests"))
        configuration.storeTimeout = .seconds(5)
        configuration.groupId = "workers"
        configuration.deadLetterTopic = "t.dead-letter"
        return BatchWriter(
            store: store, deadLetters: sink, configuration: configuration, metrics: WorkerMetrics(registry: PrometheusCollectorRegistry()),
            logger: Logger(label: "batch-writer-tests"))
    }

    /// Retries at once, at most `attempts` times (a test that needs more is a failing test, not a hang).
    static func retrying(attempts: Int = 20) -> BatchWriter<MemoryStore, MemorySink>.UntilDurable {
        { _, step in
            for _ in 0..<attempts {
                do {
                    try await step()
                    return true
                } catch {}
            }
            return false
        }
    }

    /// `count` records of topic `t`, partition 0: verified notifications, and a forged one at each of `forged`.
    func batch(_ count: Int, forged: Set<Int> = []) async throws -> (messages: [KafkaConsumerMessage], outcomes: [NotificationWorker.VerifiedRecord]) {
        var messages: [KafkaConsumerMessage] = []
        var outcomes: [NotificationWorker.VerifiedRecord] = []
        for index in 0..<count {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: index, signedDate: Self.start + Int64(index) * Self.day, type: "DID_RENEW")
            event.notificationUUID = deterministicUUID(index)
            let signed = minter.signedNotification(event)
            let value = Array((forged.contains(index) ? String(signed.dropLast(4)) + "AAAA" : signed).utf8)
            let message = KafkaConsumerMessage(topic: "t", partition: 0, offset: Int64(index), key: nil, value: value, headers: [], timestamp: nil)
            messages.append(message)
            outcomes.append(await NotificationWorker.verifiedRecord(message, with: verifier))
        }
        return (messages, outcomes)
    }

    @Test("a refused record is isolated by bisection: the others stored in one retry, it dead-lettered as storeRejected")
    func bisection() async throws {
        let (messages, outcomes) = try await batch(16)
        let store = MemoryStore()
        store.state.withLock { $0.refused = [deterministicUUID(5), deterministicUUID(11)] }
        let sink = MemorySink()
        let writer = writer(store, sink)
        var plan = writer.plan(messages, outcomes, trace: .off)
        #expect(await writer.storeNotifications(&plan, untilDurable: Self.retrying()))
        let state = store.state.withLock { $0 }
        #expect(state.committed.count == 1)
        #expect(Set(state.committed[0]) == Set((0..<16).map(deterministicUUID)).subtracting([deterministicUUID(5), deterministicUUID(11)]))
        #expect(state.recordedDeadLetters == [RecordPosition(topic: "t", partition: 0, offset: 5), RecordPosition(topic: "t", partition: 0, offset: 11)])
        #expect(sink.sent.map { $0.headers.string(DeadLetterHeader.errorCode) } == ["storeRejected", "storeRejected"])
        #expect(Set(sink.sent.compactMap { $0.headers.string(DeadLetterHeader.originalOffset) }) == ["5", "11"])
        // Two refused records in 16: each costs at most log2(16) = 4 levels of two probes, plus the first.
        #expect(state.probes <= 1 + 2 * 2 * 4, "\(state.probes) probes")
        #expect(plan.rejectedPositions.count == 2)
    }

    @Test("dead letters: one the broker acknowledged is never sent again; a redelivered batch's recorded ones are not resent")
    func deadLetterIdempotence() async throws {
        let (messages, outcomes) = try await batch(6, forged: [1, 3, 4])
        let store = MemoryStore()
        let sink = MemorySink()
        sink.state.withLock { $0.failOnce = [messages[3].value] }
        let writer = writer(store, sink)
        var plan = writer.plan(messages, outcomes, trace: .off)
        #expect(plan.deadLettered.count == 3 && plan.stored.count == 3)
        #expect(await writer.publishDeadLetters(&plan, untilDurable: Self.retrying()))
        // 1 and 4 acknowledged on the first attempt, 3 on the second: each sent exactly once.
        #expect(sink.sent.compactMap { $0.headers.string(DeadLetterHeader.originalOffset) }.sorted() == ["1", "3", "4"])
        #expect(plan.deadLettered.allSatisfy { $0.deadLetterPosition != nil })
        #expect(await writer.storeNotifications(&plan, untilDurable: Self.retrying()))
        #expect(store.state.withLock { $0.recordedDeadLetters.count } == 3)

        // The same batch redelivered (the offsets were not stored): nothing is published again.
        var again = writer.plan(messages, outcomes, trace: .off)
        #expect(await writer.publishDeadLetters(&again, untilDurable: Self.retrying()))
        #expect(sink.sent.count == 3)
    }

    @Test("a dead letter about an erased customer is neither published nor recorded")
    func suppression() async throws {
        let (messages, outcomes) = try await batch(4, forged: [0, 2])
        let store = MemoryStore()
        store.state.withLock { $0.erased = [RecordPosition(topic: "t", partition: 0, offset: 2)] }
        let sink = MemorySink()
        let writer = writer(store, sink)
        var plan = writer.plan(messages, outcomes, trace: .off)
        #expect(await writer.dropErasedDeadLetters(&plan, batch: messages, untilDurable: Self.retrying()))
        #expect(await writer.publishDeadLetters(&plan, untilDurable: Self.retrying()))
        #expect(await writer.storeNotifications(&plan, untilDurable: Self.retrying()))
        #expect(sink.sent.compactMap { $0.headers.string(DeadLetterHeader.originalOffset) } == ["0"])
        #expect(store.state.withLock { $0.recordedDeadLetters } == [RecordPosition(topic: "t", partition: 0, offset: 0)])
    }

    @Test("a step that never becomes durable abandons the batch: nothing committed")
    func abandoned() async throws {
        let (messages, outcomes) = try await batch(3)
        let store = MemoryStore()
        store.state.withLock { $0.refused = [] }
        let sink = MemorySink()
        let writer = writer(store, sink)
        var plan = writer.plan(messages, outcomes, trace: .off)
        let never: BatchWriter<MemoryStore, MemorySink>.UntilDurable = { _, _ in false }
        #expect(await writer.storeNotifications(&plan, untilDurable: never) == false)
        #expect(store.state.withLock { $0.committed.isEmpty })
    }
}
