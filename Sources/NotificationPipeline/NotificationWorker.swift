import AppStoreNotifications
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization

/// Record headers the worker sets on dead letters. The value and key are the original record's, unchanged.
public enum DeadLetterHeader {
    /// The stable error code (`VerificationError.code`), e.g. `signatureMismatch`.
    public static let errorCode = "error-code"
    /// The human-readable reason.
    public static let errorReason = "error-reason"
    /// For `nestedInvalid`: the nested JWS's own code.
    public static let errorCause = "error-cause"
    public static let originalTopic = "original-topic"
    public static let originalPartition = "original-partition"
    public static let originalOffset = "original-offset"
    public static let originalTimestamp = "original-timestamp"
    public static let consumerGroup = "consumer-group"
    public static let failedAt = "failed-at"
    /// How many times the record was tried (1 for verification failures, which never change on retry).
    public static let attempt = "attempt"
}

/// Consumes notifications, verifies them, stores entitlement state, dead-letters what can never verify.
///
/// Per batch: verify every record (in parallel, one task per record, sharing the verifier and its chain cache);
/// write the verified ones in one PostgreSQL transaction (in offset order per partition); dead-letter the
/// permanent failures (acknowledged by the broker); only then store the batch's offsets. A transient failure
/// (database or broker away) pauses the assigned partitions and retries the same batch with jittered backoff,
/// so nothing is skipped and nothing is dead-lettered for being unlucky.
public final class NotificationWorker: Service, Sendable {
    let configuration: WorkerConfiguration
    let consumer: KafkaConsumer
    let deadLetters: KafkaProducer
    let store: EntitlementStore
    let verifier: SignedPayloadVerifier
    let metrics: WorkerMetrics
    let logger: Logger
    /// Whether the last batch could be stored.
    let healthy = HealthFlag(true)
    /// Whether start-up (migrations) is done.
    let started = HealthFlag(false)

    public init(
        configuration: WorkerConfiguration, consumer: KafkaConsumer, deadLetters: KafkaProducer, store: EntitlementStore,
        verifier: SignedPayloadVerifier, metrics: WorkerMetrics = WorkerMetrics(registry: PrometheusCollectorRegistry()), logger: Logger
    ) {
        self.configuration = configuration
        self.consumer = consumer
        self.deadLetters = deadLetters
        self.store = store
        self.verifier = verifier
        self.metrics = metrics
        self.logger = logger
    }

    /// For `/health/ready`: nil when ready, else why not.
    public var notReadyReason: String? {
        if !started.value { return "starting (applying migrations)" }
        if !healthy.value { return "retrying a transient failure (database or broker unavailable)" }
        if !consumer.isBrokerReachable { return "no Kafka broker reachable" }
        return nil
    }

    public func run() async throws {
        if configuration.migrateAtStart {
            // The database may come up after us (compose, Kubernetes): retry until it answers.
            guard await untilDurable("migrations", pausing: false, {
                let applied = try await Self.withDeadline(configuration.storeTimeout * 4, "applying migrations") { [store] in try await store.migrate() }
                logger.info("schema ready", metadata: ["applied": "\(applied)", "version": "\(Migrations.all.last?.version ?? 0)"])
            }) else { return }
        }
        started.set(true)
        metrics.ready.set(1.0)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [consumer, metrics] in await Self.trackAssignment(consumer.rebalanceEvents, metrics) }
            await withGracefulShutdownHandler {
                // Two stages: while batch N is written (dead letters, transaction, offsets), batch N+1 is polled
                // and verified. Writes stay in poll order, one batch at a time, so per-partition order holds and
                // offsets are stored only after their transaction committed. Verification is CPU and the write
                // mostly waits on PostgreSQL; overlapped, the worker is bound by the slower of the two, not their
                // sum. A partition revoked while its batch is being written is redelivered to its next owner,
                // whose ledger sees duplicates.
                await withTaskGroup(of: Void.self) { writes in
                    var writing = false
                    while !Task.isCancelled, !Task.isShuttingDownGracefully {
                        do {
                            let batch = try await consumer.pollBatch(maximum: configuration.batchSize, timeoutMilliseconds: 200)
                            if batch.isEmpty { continue }
                            let started = ContinuousClock.now
                            let outcomes = await verify(batch)
                            metrics.verificationDuration.record(ContinuousClock.now - started)
                            if writing { await writes.next() }
                            writes.addTask { await self.write(batch, outcomes, started: started) }
                            writing = true
                        } catch {
                            logger.error("polling failed: \(error)")
                            try? await Task.sleep(for: .seconds(1))
                        }
                    }
                    await writes.waitForAll()
                }
            } onGracefulShutdown: {
                // The loop sees the shutdown between batches: the batch being written finishes (or, if its store
                // fails, is abandoned uncommitted and redelivered to the next owner).
            }
            group.cancelAll()
        }
    }

    /// Keeps `worker_assigned_partitions` current: operators see members that own nothing (more workers than
    /// partitions) and when a rolling restart's rebalance has settled (every partition owned again).
    static func trackAssignment(_ events: AsyncStream<KafkaRebalanceEvent>, _ metrics: WorkerMetrics) async {
        var owned: Set<KafkaTopicPartition> = []
        for await event in events {
            switch event {
            case .assigned(let partitions): owned.formUnion(partitions)
            case .revoked(let partitions): owned.subtract(partitions)
            }
            metrics.assignedPartitions.set(Double(owned.count))
        }
    }

    /// One verified batch: dead letters, then the store transaction, then the offsets. Each step is retried until
    /// it is durable (or the process stops) and is never repeated once it succeeded.
    func write(_ batch: [KafkaConsumerMessage], _ outcomes: [Result<VerifiedNotification, VerificationError>], started: ContinuousClock.Instant) async {
        var stored: [StoredNotification] = []
        var pendingDeadLetters: [KafkaProducerMessage] = []
        for (message, outcome) in zip(batch, outcomes) {
            switch outcome {
            case .success(let verified):
                metrics.notificationType(verified.payload.notificationType)
                for unknown in verified.unknownValues {
                    metrics.unknownValue(field: unknown.field)
                    logger.notice("kept a value this version does not know", metadata: ["field": "\(unknown.field)", "value": "\(unknown.rawValue)"])
                }
                stored.append(
                    StoredNotification(
                        verified: verified, signedPayload: String(decoding: message.value, as: UTF8.self), kafkaTopic: message.topic,
                        kafkaPartition: message.partition, kafkaOffset: message.offset,
                        receivedAt: message.headers.string(NotificationRecordHeader.receivedAt).flatMap { Int64($0) }.map(Timestamp.init(millisecondsSince1970:))))
            case .failure(let error):
                pendingDeadLetters.append(deadLetter(message, error))
                // The reason is logged, never the payload.
                logger.warning("dead-lettering a record", metadata: [
                    "code": "\(error.code)", "reason": "\(error.reason)", "partition": "\(message.partition)", "offset": "\(message.offset)",
                ])
            }
        }
        // Sent together, awaited together; one the broker acknowledged is never sent again, even if another fails.
        let deadLetterCount = pendingDeadLetters.count
        guard await untilDurable("dead letters", {
            let producer = deadLetters
            let letters = pendingDeadLetters
            let delivered = await withTaskGroup(of: Int?.self) { group in
                for (index, letter) in letters.enumerated() {
                    group.addTask { (try? await producer.sendAndAwait(letter)).map { _ in index } }
                }
                var delivered: Set<Int> = []
                for await index in group { if let index { delivered.insert(index) } }
                return delivered
            }
            pendingDeadLetters = letters.enumerated().filter { !delivered.contains($0.offset) }.map(\.element)
            if !pendingDeadLetters.isEmpty { throw DeadLetterNotAcknowledged(count: pendingDeadLetters.count) }
        }) else { return }
        for outcome in outcomes { if case .failure(let error) = outcome { metrics.deadLettered(code: error.code) } }
        metrics.records("dead_lettered", deadLetterCount)
        guard await untilDurable("notifications", {
            // Bounded: while the database is unreachable the pool queues the query instead of failing it; the
            // deadline turns that into a transient failure (not ready, backoff, retry). A transaction that
            // committed just as its deadline passed is harmless: the retry finds every notification in the ledger.
            let result = try await Self.withDeadline(configuration.storeTimeout, "storing the batch") { [store, stored] in try await store.store(stored) }
            metrics.records("applied", result.applied)
            metrics.records("duplicate", result.duplicates)
            metrics.records("stale", result.stale)
            logger.debug("batch stored", metadata: ["records": "\(batch.count)", "applied": "\(result.applied)", "duplicates": "\(result.duplicates)"])
        }) else { return }

        var next: [KafkaTopicPartition: Int64] = [:]
        for message in batch { next[message.topicPartition] = max(next[message.topicPartition] ?? 0, message.offset + 1) }
        do {
            try consumer.storeOffsets(next)
        } catch {
            // The batch is durable; its partitions moved to another member during it. That member redelivers these
            // records and the ledger ignores them: nothing to retry here.
            logger.warning("offsets not stored, the partitions were reassigned; the new owner will skip these as duplicates: \(error)")
        }
        for (partition, offset) in next {
            if let high = consumer.cachedHighWatermark(partition) { metrics.lag(partition: partition, records: max(0, high - offset)) }
        }
        metrics.batchDuration.record(ContinuousClock.now - started)
    }

    /// Runs `step` until it succeeds; false when the process stops first (the batch is then abandoned
    /// uncommitted and redelivered). While retrying, the assigned partitions are paused; nothing is polled, so no
    /// record can be fetched and lost meanwhile. librdkafka keeps heartbeating; if an outage outlasts
    /// `max.poll.interval.ms`, the member leaves the group and the batch is redelivered to whoever owns it next.
    func untilDurable(_ what: String, pausing: Bool = true, _ step: () async throws -> Void) async -> Bool {
        var attempt = 0
        var paused: [KafkaTopicPartition] = []
        while true {
            attempt += 1
            do {
                try await step()
                healthy.set(true)
                if attempt > 1 { metrics.ready.set(1.0) }
                if !paused.isEmpty { try? await consumer.resume(paused) }
                return true
            } catch {
                healthy.set(false)
                metrics.ready.set(0.0)
                metrics.retry(step: what)
                if Task.isCancelled || Task.isShuttingDownGracefully {
                    logger.warning("stopping with \(what) not stored; the batch will be redelivered: \(error)")
                    if !paused.isEmpty { try? await consumer.resume(paused) }
                    return false
                }
                if pausing, paused.isEmpty, let assignment = try? await consumer.assignment() {
                    try? await consumer.pause(assignment)
                    paused = assignment
                }
                let backoff = Self.backoff(attempt: attempt, maximum: configuration.maximumBackoff)
                logger.warning("\(what) not stored (attempt \(attempt)), retrying in \(backoff): \(error)")
                try? await Task.sleep(for: backoff)
            }
        }
    }

    /// `body`'s result, or `StepTimedOut` after `limit`. Returns at the deadline even if `body` ignores
    /// cancellation (a query on a connection the server dropped may): `body` is cancelled and left to finish on its
    /// own, which is harmless because storing is idempotent (ledger, forward-only state).
    static func withDeadline<T: Sendable>(_ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let race = DeadlineRace<T>()
        return try await withCheckedThrowingContinuation { continuation in
            race.continuation.withLock { $0 = continuation }
            let work = Task {
                let result: Result<T, any Error>
                do { result = .success(try await body()) } catch { result = .failure(error) }
                race.continuation.withLock { $0.take() }?.resume(with: result)
                race.timer.withLock { $0 }?.cancel()
            }
            let timer = Task {
                try? await Task.sleep(for: limit)
                guard !Task.isCancelled, let continuation = race.continuation.withLock({ $0.take() }) else { return }
                work.cancel()
                continuation.resume(throwing: StepTimedOut(step: what, limit: limit))
            }
            race.timer.withLock { $0 = timer }
        }
    }

    /// Verification of every record, in parallel; results in batch order.
    func verify(_ batch: [KafkaConsumerMessage]) async -> [Result<VerifiedNotification, VerificationError>] {
        await withTaskGroup(of: (Int, Result<VerifiedNotification, VerificationError>).self) { group in
            for (index, message) in batch.enumerated() {
                group.addTask { [verifier] in (index, await Self.verify(message.value, with: verifier)) }
            }
            var results = [Result<VerifiedNotification, VerificationError>](repeating: .failure(.malformedJWS("not verified")), count: batch.count)
            for await (index, result) in group { results[index] = result }
            return results
        }
    }

    /// One record's verification as a value. A function of its own, not a `do throws(VerificationError)` inside
    /// the task closure: with Swift 6.3.1 at -O that closure returned a corrupt index (the release worker trapped
    /// in `results[index]` within a second of a 100 000-record benchmark; debug builds were fine).
    static func verify(_ value: [UInt8], with verifier: SignedPayloadVerifier) async -> Result<VerifiedNotification, VerificationError> {
        guard let text = String(validating: value, as: UTF8.self) else { return .failure(.malformedJWS("the record is not UTF-8 text")) }
        do {
            return .success(try await verifier.verifyNotification(text))
        } catch {
            return .failure(error)
        }
    }

    func deadLetter(_ message: KafkaConsumerMessage, _ error: VerificationError) -> KafkaProducerMessage {
        var headers = message.headers
        headers.append(KafkaHeader(key: DeadLetterHeader.errorCode, string: error.code))
        headers.append(KafkaHeader(key: DeadLetterHeader.errorReason, string: error.reason))
        if case .nestedInvalid = error { headers.append(KafkaHeader(key: DeadLetterHeader.errorCause, string: error.rootCause.code)) }
        headers.append(KafkaHeader(key: DeadLetterHeader.originalTopic, string: message.topic))
        headers.append(KafkaHeader(key: DeadLetterHeader.originalPartition, string: String(message.partition)))
        headers.append(KafkaHeader(key: DeadLetterHeader.originalOffset, string: String(message.offset)))
        if let timestamp = message.timestamp { headers.append(KafkaHeader(key: DeadLetterHeader.originalTimestamp, string: String(timestamp))) }
        headers.append(KafkaHeader(key: DeadLetterHeader.consumerGroup, string: configuration.groupId))
        headers.append(KafkaHeader(key: DeadLetterHeader.failedAt, string: String(Int64(Date().timeIntervalSince1970 * 1000))))
        headers.append(KafkaHeader(key: DeadLetterHeader.attempt, string: "1"))
        return KafkaProducerMessage(topic: configuration.deadLetterTopic, key: message.key, value: message.value, headers: headers)
    }

    /// Exponential backoff with full jitter, capped.
    static func backoff(attempt: Int, maximum: Duration) -> Duration {
        let base = Duration.milliseconds(100) * (1 << min(attempt, 10))
        let capped = min(base, maximum)
        return capped * Double.random(in: 0.5...1.0)
    }
}

/// Some dead letters were not acknowledged by the broker (retried; never skipped).
struct DeadLetterNotAcknowledged: Error, CustomStringConvertible {
    var count: Int
    var description: String { "\(count) dead letter(s) not acknowledged by the broker" }
}

/// A Bool shared between tasks.
final class HealthFlag: Sendable {
    private let storage: Synchronization.Atomic<Bool>
    init(_ value: Bool) { storage = Synchronization.Atomic(value) }
    var value: Bool { storage.load(ordering: .relaxed) }
    func set(_ value: Bool) { storage.store(value, ordering: .relaxed) }
}

/// A step that did not finish in time (the database unreachable, its pool waiting for a connection): transient.
struct StepTimedOut: Error, CustomStringConvertible {
    var step: String
    var limit: Duration
    var description: String { "\(step) took longer than \(limit) (database unreachable?)" }
}

/// Who answers first in `withDeadline`: the work or the timer.
private final class DeadlineRace<T: Sendable>: Sendable {
    let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)
    let timer = Mutex<Task<Void, Never>?>(nil)
}
