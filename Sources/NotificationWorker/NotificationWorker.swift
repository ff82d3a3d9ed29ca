import AppStoreNotifications
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import NotificationRecords
import Prometheus
import ServiceLifecycle
import ServiceRuntime
import Synchronization
import Tracing

/// Consumes notifications, verifies them, stores entitlement state, dead-letters what can never verify.
///
/// Per batch: verify every record (in parallel, one task per record, sharing the verifier and its chain cache);
/// write the verified ones in one PostgreSQL transaction (in offset order per partition); dead-letter the
/// permanent failures (acknowledged by the broker); only then store the batch's offsets. A transient failure
/// (database or broker away) pauses the assigned partitions and retries the same batch with jittered backoff,
/// so nothing is skipped and nothing is dead-lettered for being unlucky.
package final class NotificationWorker: Service, Sendable {
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
    /// False while records wait for an online revocation check's answer (`VERIFY_ONLINE_CHECKS`).
    let revocationChecksAnswering = HealthFlag(true)
    /// Set when the consumer hit a fatal error: the worker goes not-ready and `run()` throws, so the process exits
    /// non-zero and the orchestrator replaces it.
    let fatalReason = Mutex<String?>(nil)

    package init(
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
    package var notReadyReason: String? {
        if let fatal = fatalReason.withLock({ $0 }) { return "fatal consumer error: \(fatal); the process is exiting" }
        if !started.value { return "starting (applying migrations)" }
        if !healthy.value { return "retrying a transient failure (database or broker unavailable)" }
        if !revocationChecksAnswering.value {
            return "waiting for the OCSP responder (online revocation checks): records wait and are verified again, none is accepted unchecked"
        }
        if !consumer.isBrokerReachable { return "no Kafka broker reachable" }
        return nil
    }

    package func run() async throws {
        if configuration.migrateAtStart {
            // The database may come up after us (compose, Kubernetes): retry until it answers.
            guard await untilDurable("migrations", pausing: false, {
                let applied = try await withDeadline(configuration.storeTimeout * 4, "applying migrations") { [store] in try await store.migrate() }
                logger.info("schema ready", metadata: ["applied": "\(applied)", "version": "\(Migrations.all.last?.version ?? 0)"])
            }) else { return }
        }
        started.set(true)
        metrics.ready.set(1.0)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [consumer, metrics] in await Self.trackAssignment(consumer.rebalanceEvents, metrics) }
            group.addTask { [consumer] in await Self.probeWhileUnreachable(consumer, every: .seconds(5)) }
            await withGracefulShutdownHandler {
                // Three stages: while batch N is written (dead letters, transaction, offsets), batch N+1 is
                // verified and batch N+2 polled. Writes stay in poll order, one batch at a time, so per-partition
                // order holds and offsets are stored only after their transaction committed. Verification is CPU
                // and the write mostly waits on PostgreSQL; overlapped, the worker is bound by the slowest stage,
                // not their sum. A partition revoked while its batch is being written is redelivered to its next
                // owner, whose ledger sees duplicates; a polled batch not yet verified when the worker stops is
                // never committed and is redelivered the same way.
                //
                // Priorities: the write runs high, each record's verification low. The executor takes jobs of one
                // priority in turn; at equal priority, each step of the write (one per PostgreSQL answer, a dozen
                // a batch) queued behind the whole next batch's verifications, so the write stage took ≈1.6 times
                // as long (`worker-bench`, 2 cores).
                await withTaskGroup(of: Void.self) { writes in
                    var writing = false
                    var batch: [KafkaConsumerMessage] = []
                    var held = HeldPartitions()
                    while !Task.isCancelled, !Task.isShuttingDownGracefully {
                        do {
                            await resumeDue(&held)
                            // Records of a held partition polled before it was paused are dropped: it was sought back
                            // to its waiting record, and is read again from there once resumed.
                            batch.removeAll { held.contains($0.topicPartition) }
                            if batch.isEmpty {
                                batch = try await consumer.pollBatch(maximum: configuration.batchSize, timeoutMilliseconds: 200)
                                batch.removeAll { held.contains($0.topicPartition) }
                                if batch.isEmpty { continue }
                            }
                            // The next poll (librdkafka's queue, on the client's own thread) runs beside this verification.
                            async let following = consumer.pollBatch(maximum: configuration.batchSize, timeoutMilliseconds: 200)
                            let started = ContinuousClock.now
                            let trace = BatchTrace(batch, consumerGroup: configuration.groupId)
                            var outcomes = await verify(batch, trace: trace)
                            // An online revocation check without an answer holds back only its own partition, from
                            // that record on (paused, sought back to it, read again after a backoff); every other
                            // partition's records go on.
                            await hold(waitingIn: &batch, &outcomes, held: &held)
                            if batch.isEmpty {
                                batch = try await following
                                continue
                            }
                            metrics.verificationDuration.record(ContinuousClock.now - started)
                            if writing { await writes.next() }
                            writes.addTask(priority: .high) { [batch] in await self.write(batch, outcomes, trace: trace, started: started) }
                            writing = true
                            batch = []
                            batch = try await following
                        } catch let error as KafkaError where error.isFatal {
                            // This member can never consume again (e.g. a fenced static member): stop, so the
                            // process exits non-zero and is replaced, instead of looping while reporting ready.
                            fatalReason.withLock { $0 = "\(error)" }
                            metrics.ready.set(0.0)
                            break
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
        if let reason = fatalReason.withLock({ $0 }) { throw FatalConsumerError(reason: reason) }
    }

    /// While the brokers are marked unreachable (after a transport error), asks for metadata every `period`: a
    /// quiet worker (nothing fetched for hours) becomes ready again right after a routine broker restart instead
    /// of waiting for its next record, which would block node drains through the PodDisruptionBudget.
    static func probeWhileUnreachable(_ consumer: KafkaConsumer, every period: Duration) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: period)
            if !consumer.isBrokerReachable { _ = await consumer.checkBrokerReachable() }
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

    /// The batch writer's phases over this worker's store and dead-letter producer.
    var writer: BatchWriter<EntitlementStore, KafkaProducer> {
        BatchWriter(store: store, deadLetters: deadLetters, configuration: configuration, metrics: metrics, logger: logger)
    }

    /// One verified batch: dead letters, then the store transaction, then the offsets (`BatchWriter`'s phases). Each
    /// step is retried until it is durable (or the process stops) and is never repeated once it succeeded.
    func write(_ batch: [KafkaConsumerMessage], _ outcomes: [VerifiedRecord], trace: BatchTrace = .off, started: ContinuousClock.Instant) async {
        let writer = self.writer
        var plan = writer.plan(batch, outcomes, trace: trace)
        let untilDurable: BatchWriter<EntitlementStore, KafkaProducer>.UntilDurable = { what, step in await self.untilDurable(what, step) }
        guard await writer.dropErasedDeadLetters(&plan, batch: batch, untilDurable: untilDurable),
            await writer.publishDeadLetters(&plan, untilDurable: untilDurable),
            await writer.storeNotifications(&plan, untilDurable: untilDurable)
        else {
            return trace.finish(plan.spans, transactionStart: plan.transactionStart, rows: 0, error: "abandoned: the process stopped; the batch is redelivered")
        }
        if trace.isOn {
            writer.describeOutcomes(&plan)
            trace.finish(plan.spans, transactionStart: plan.transactionStart, rows: plan.stored.count + plan.deadLettered.count)
        }
        let stored = plan.stored

        if store.consentRescindedErases, stored.contains(where: { $0.verified.payload.rawNotificationType == "RESCIND_CONSENT" }) {
            await runPendingErasures()
        }

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

    /// Runs the erasures RESCIND_CONSENT queued (`CONSENT_RESCINDED_ERASES`). A failure is logged and left queued:
    /// the worker's maintenance round runs them again (`WorkerMaintenance`).
    func runPendingErasures() async {
        guard let key = store.erasureKey else { return }
        do {
            let reports = try await ErasureStore(client: store.client, logger: logger).runPending(key: key, emitsEvents: store.emitsEvents)
            metrics.erasuresRun(reports.count)
        } catch {
            logger.warning("queued erasures not run yet, retried at the next maintenance round: \(UntrustedText.escaped(String(describing: error), limit: 400))")
        }
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
                // Escaped and bounded: a database error may quote the refused data.
                logger.warning("\(what) not stored (attempt \(attempt)), retrying in \(backoff): \(UntrustedText.escaped(String(describing: error), limit: 400))")
                try? await Task.sleep(for: backoff)
            }
        }
    }

    /// Partitions held back because one of their records waits for an online revocation check's answer: each from
    /// its first waiting record, until its backoff passes.
    struct HeldPartitions {
        var entries: [KafkaTopicPartition: (offset: Int64, resumeAt: ContinuousClock.Instant, attempt: Int)] = [:]
        /// Consecutive holds per partition (the backoff grows while the responder stays silent).
        var attempts: [KafkaTopicPartition: Int] = [:]

        func contains(_ partition: KafkaTopicPartition) -> Bool { entries[partition] != nil }
    }

    /// Holds back the partitions with a record whose verification failed transiently (an online revocation check
    /// that got no answer): the partition is paused and sought back to that record, and the batch keeps only what
    /// comes before it in that partition (order holds; offsets are stored only for what is written). Never
    /// dead-letters such a record and never lets it through unchecked; counted in
    /// `worker_revocation_check_waits_total`, the worker not ready while any partition is held.
    func hold(waitingIn batch: inout [KafkaConsumerMessage], _ outcomes: inout [VerifiedRecord], held: inout HeldPartitions) async {
        var firstWaiting: [KafkaTopicPartition: Int64] = [:]
        var reason = ""
        for (message, outcome) in zip(batch, outcomes) {
            guard case .failure(let error) = outcome.outcome, error.isTransient else { continue }
            firstWaiting[message.topicPartition] = min(firstWaiting[message.topicPartition] ?? .max, message.offset)
            reason = error.reason
        }
        // A partition that came back and verified: its backoff starts over next time, and it no longer keeps the
        // worker not ready (ready again once no partition is held or waits to be read again).
        for partition in Set(batch.map(\.topicPartition)) where firstWaiting[partition] == nil { held.attempts[partition] = nil }
        defer { revocationChecksAnswering.set(held.attempts.isEmpty) }
        guard !firstWaiting.isEmpty else { return }
        for (partition, offset) in firstWaiting {
            let attempt = (held.attempts[partition] ?? 0) + 1
            held.attempts[partition] = attempt
            let backoff = Self.backoff(attempt: attempt, maximum: configuration.maximumBackoff)
            do {
                try await consumer.pause([partition])
                try await consumer.seek(partition, to: offset)
            } catch {
                logger.warning("could not hold back a partition waiting for an online revocation check", metadata: ["partition": "\(partition)", "error": "\(error)"])
            }
            held.entries[partition] = (offset, ContinuousClock.now + backoff, attempt)
            logger.warning(
                "a partition waits for an online revocation check", metadata: ["partition": "\(partition)", "offset": "\(offset)", "attempt": "\(attempt)", "reason": "\(reason)"])
        }
        let kept = zip(batch, outcomes).filter { message, _ in firstWaiting[message.topicPartition].map { message.offset < $0 } ?? true }
        metrics.revocationCheckWaits(batch.count - kept.count)
        batch = kept.map(\.0)
        outcomes = kept.map(\.1)
    }

    /// Resumes the held partitions whose backoff passed: their records are read again from the one that waited.
    func resumeDue(_ held: inout HeldPartitions) async {
        let now = ContinuousClock.now
        guard held.entries.values.contains(where: { $0.resumeAt <= now }) else { return }
        // A partition that left this worker in a rebalance is its next owner's to wait for.
        if let assigned = try? await consumer.assignment() {
            for partition in held.attempts.keys where !assigned.contains(partition) { held.attempts[partition] = nil }
        }
        for (partition, entry) in held.entries where entry.resumeAt <= now {
            do {
                try await consumer.resume([partition])
            } catch {
                // Revoked meanwhile (its next owner reads it from the last stored offset): nothing to resume or wait for.
                logger.debug("could not resume a held partition", metadata: ["partition": "\(partition)", "error": "\(error)"])
                held.attempts[partition] = nil
            }
            held.entries[partition] = nil
        }
        if held.attempts.isEmpty { revocationChecksAnswering.set(true) }
    }

    /// A record's verification outcome and, for a verified JWS, its archive form (taken apart in the same task).
    struct VerifiedRecord: Sendable {
        var outcome: Result<VerifiedNotification, VerificationError>
        var archived: ArchivedJWS?
    }

    /// Verification of every record, in parallel; results in batch order. Each task also takes the verified JWS
    /// apart for the archive (ArchivedJWS), so that work runs on all cores, not in the batch's write.
    func verify(_ batch: [KafkaConsumerMessage], trace: BatchTrace = .off) async -> [VerifiedRecord] {
        await withTaskGroup(of: (Int, VerifiedRecord).self) { group in
            for (index, message) in batch.enumerated() {
                group.addTask(priority: .low) { [verifier] in
                    (index, await Self.verifiedRecord(message, with: verifier, trace: trace, index: index))
                }
            }
            var results = [VerifiedRecord](repeating: VerifiedRecord(outcome: .failure(.malformedJWS("not verified"))), count: batch.count)
            for await (index, result) in group { results[index] = result }
            return results
        }
    }

    /// One record verified (by its `record-kind` header; in its span when `trace` is on, `index` its place in the
    /// batch) and, when it verified, taken apart for the archive.
    static func verifiedRecord(
        _ message: KafkaConsumerMessage, with verifier: SignedPayloadVerifier, trace: BatchTrace = .off, index: Int = 0
    ) async -> VerifiedRecord {
        let kind = message.headers.string(NotificationRecordHeader.recordKind)
        let outcome = await trace.verifying(index) { await verify(message.value, kind: kind, with: verifier) }
        return VerifiedRecord(outcome: outcome, archived: (try? outcome.get()).flatMap { _ in ArchivedJWS.decompose(message.value) })
    }

    /// One record's verification as a value. A function of its own, not a `do throws(VerificationError)` inside
    /// the task closure: with Swift 6.3.1 at -O that closure returned a corrupt index (the release worker trapped
    /// in `results[index]` within a second of a 100 000-record benchmark; debug builds were fine).
    ///
    /// `kind`: the `record-kind` header. Absent on Apple's notifications (ingest never sets it); the pull side's
    /// records name theirs, and an unknown kind is refused rather than guessed at.
    static func verify(_ value: [UInt8], kind: String? = nil, with verifier: SignedPayloadVerifier) async -> Result<VerifiedNotification, VerificationError> {
        do {
            switch kind.map(PulledRecordKind.init(rawValue:)) {
            case nil:
                guard let text = String(validating: value, as: UTF8.self) else { return .failure(.malformedJWS("the record is not UTF-8 text")) }
                return .success(try await verifier.verifyNotification(text))
            case .statusSnapshot?:
                return .success(try await verifier.verifyStatusSnapshot(value))
            case .historyTransaction?:
                return .success(try await verifier.verifyHistoryTransaction(value))
            case .purchase?:
                return .success(try await verifier.verifyPurchaseRecord(value))
            case .some(nil):
                return .failure(.malformedPayload("the record kind \(UntrustedText.quoted(kind ?? "", limit: 40)) is not one this version knows"))
            }
        } catch {
            return .failure(error)
        }
    }

    /// Exponential backoff with full jitter, capped.
    static func backoff(attempt: Int, maximum: Duration) -> Duration {
        let base = Duration.milliseconds(100) * (1 << min(attempt, 10))
        let capped = min(base, maximum)
        return capped * Double.random(in: 0.5...1.0)
    }
}

/// The consumer hit a fatal error: the worker stops so that its process exits non-zero and is replaced.
package struct FatalConsumerError: Error, CustomStringConvertible {
    package var reason: String
    package var description: String { "fatal consumer error, exiting so the orchestrator replaces this process: \(reason)" }
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

