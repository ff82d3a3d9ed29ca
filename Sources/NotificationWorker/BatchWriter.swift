import AppStoreNotifications
import EntitlementStore
import KafkaClient
import Logging
import NotificationRecords
import Tracing

/// What the batch writer asks of PostgreSQL: `EntitlementStore` in the process, an in-memory double in the unit
/// tests. A permanent refusal of the data is a `PSQLError` of SQLSTATE class 22 or 23 (or a `DataRefused`);
/// anything else thrown is transient (`StoreFailure`).
protocol BatchStore: Sendable {
    /// Whether dead letters are screened against the erasure list (a key is configured).
    var screensErasures: Bool { get }
    /// Which of `records` claim an erased customer (they are neither published nor recorded).
    func erasedClaims(_ records: [DeadLetteredRecord]) async throws -> Set<RecordPosition>
    /// Publishes dead letters once across every owner of their partitions (`EntitlementStore.withDeadLetterClaim`):
    /// `publish` gets those already dead-lettered (with where their letter landed, when a claim says) and returns
    /// where each letter it published landed.
    func withDeadLetterClaim<Published: Sendable>(
        _ positions: [RecordPosition],
        publish: (_ alreadySent: [RecordPosition: RecordPosition?]) async throws -> (Published, claims: [RecordPosition: RecordPosition])
    ) async throws -> (alreadySent: [RecordPosition: RecordPosition?], published: Published)
    /// The one batch transaction: notifications applied, dead-lettered positions recorded.
    func store(_ records: [StoredNotification], deadLettered: [DeadLetteredRecord]) async throws -> BatchOutcome
    /// `store` rolled back: whether PostgreSQL accepts `records` at all.
    func probe(_ records: [StoredNotification]) async throws
}

extension EntitlementStore: BatchStore {
    var screensErasures: Bool { erasureKey != nil }
}

/// Where dead letters go: the dead-letter topic's producer, or a double.
protocol DeadLetterSink: Sendable {
    func sendAndAwait(_ message: KafkaProducerMessage) async throws -> KafkaDeliveryReport
}

extension KafkaProducer: DeadLetterSink {}

/// A permanent refusal of the data, for stores that are not PostgreSQL (the unit tests' double).
struct DataRefused: Error {
    var sqlState: String
    var message: String
}

/// The worker's write of one verified batch, as named phases: sort the outcomes, drop dead letters about erased
/// customers, publish the dead letters, store the notifications (bisecting a refused batch). Each phase that
/// touches the outside is retried by `untilDurable` until it is durable, and is never repeated once it was.
struct BatchWriter<Store: BatchStore, Sink: DeadLetterSink>: Sendable {
    let store: Store
    let deadLetters: Sink
    /// The store timeout, the consumer group and the dead-letter topic.
    let configuration: WorkerConfiguration
    let metrics: WorkerMetrics
    let logger: Logger

    var storeTimeout: Duration { configuration.storeTimeout }
    var consumerGroup: String { configuration.groupId }
    var deadLetterTopic: String { configuration.deadLetterTopic }

    /// One batch on its way: what is stored, what is dead-lettered, what the trace says of each record.
    struct Plan {
        var stored: [StoredNotification] = []
        var storedIndices: [Int] = []
        var deadLettered: [DeadLetteredRecord] = []
        var pendingDeadLetters: [(record: DeadLetteredRecord, letter: KafkaProducerMessage)] = []
        var spans: [BatchTrace.Description] = []
        var rejectedPositions: Set<RecordPosition> = []
        var outcome = BatchOutcome()
        /// When the last attempt of the batch transaction began (the trace's transaction span).
        var transactionStart = DefaultTracerClock.now
    }

    /// Retries a step until it is durable; false when the process stops first (the batch is then redelivered).
    typealias UntilDurable = (_ what: String, _ step: () async throws -> Void) async -> Bool

    // MARK: - Phase 1: sort

    /// Each record becomes a notification to store or a dead letter to publish, with its trace description.
    func plan(_ batch: [KafkaConsumerMessage], _ outcomes: [NotificationWorker.VerifiedRecord], trace: BatchTrace) -> Plan {
        var plan = Plan(spans: [BatchTrace.Description](repeating: .init(), count: trace.isOn ? batch.count : 0))
        for (index, (message, verifiedRecord)) in zip(batch, outcomes).enumerated() {
            let receivedAt = NotificationRecordHeader.receivedAt(of: message.headers)
            let redriven = RedriveHeader.isRedriven(message.headers)
            switch verifiedRecord.outcome {
            case .success(let verified):
                countUnknownValues(of: verified)
                var notification = StoredNotification(
                    verified: verified, signedPayloadBytes: message.value, kafkaTopic: message.topic, kafkaPartition: message.partition,
                    kafkaOffset: message.offset, receivedAt: receivedAt, source: NotificationRecordHeader.source(of: message.headers),
                    archived: verifiedRecord.archived)
                notification.redriven = redriven
                if trace.isOn {
                    plan.spans[index] = .init(uuid: verified.payload.notificationUUID, type: verified.payload.rawNotificationType, subtype: verified.payload.rawSubtype)
                    notification.traceparent = trace.traceparent(of: index)
                }
                plan.stored.append(notification)
                plan.storedIndices.append(index)
            case .failure(let error):
                var record = DeadLetteredRecord(
                    position: RecordPosition(topic: message.topic, partition: message.partition, offset: message.offset), errorCode: error.code,
                    reason: error.reason, payload: message.value, receivedAt: receivedAt)
                record.redriven = redriven
                if trace.isOn {
                    // What the payload claims (unverified, escaped when shown), so the trace can be found by its uuid.
                    plan.spans[index] = .init(uuid: record.claims.notificationUUID, type: record.claims.notificationType, outcome: "dead-lettered")
                    record.traceparent = trace.traceparent(of: index)
                }
                plan.deadLettered.append(record)
                plan.pendingDeadLetters.append((record, deadLetter(message, error, context: trace.context(of: index))))
            }
        }
        return plan
    }

    func countUnknownValues(of verified: VerifiedNotification) {
        metrics.notificationType(verified)
        for unknown in verified.unknownValues {
            metrics.unknownValue(field: unknown.field)
            logger.notice("kept a value this version does not know", metadata: ["field": "\(unknown.field)", "value": "\(UntrustedText.quoted(unknown.rawValue))"])
        }
    }

    /// The dead letter of `message`: the record's span, when tracing is on, travels with it (`traceparent`), so a
    /// re-drive continues the notification's trace.
    func deadLetter(_ message: KafkaConsumerMessage, _ error: VerificationError, context: ServiceContext? = nil) -> KafkaProducerMessage {
        NotificationRecord.deadLetter(
            of: RecordPosition(topic: message.topic, partition: message.partition, offset: message.offset), key: message.key, value: message.value,
            headers: message.headers.injecting(context), timestamp: message.timestamp,
            failure: (error.code, error.reason, { if case .nestedInvalid = error { return error.rootCause.code } else { return nil } }()),
            consumerGroup: consumerGroup, to: deadLetterTopic, now: NotificationRecord.now())
    }

    // MARK: - Phase 2: erased customers' dead letters

    /// A dead letter that claims an erased subscription (a re-drive of an erased customer's record that fails
    /// again) is neither published nor recorded: it would bring the identifiers back (docs/privacy.md).
    func dropErasedDeadLetters(_ plan: inout Plan, batch: [KafkaConsumerMessage], untilDurable: UntilDurable) async -> Bool {
        guard store.screensErasures, !plan.deadLettered.isEmpty else { return true }
        var erased: Set<RecordPosition> = []
        let records = plan.deadLettered
        guard await untilDurable("erasure check of dead letters", {
            erased = try await withDeadline(storeTimeout, "checking dead letters against erasures") { [store] in try await store.erasedClaims(records) }
        }) else { return false }
        guard !erased.isEmpty else { return true }
        plan.deadLettered.removeAll { erased.contains($0.position) }
        plan.pendingDeadLetters.removeAll { erased.contains($0.record.position) }
        metrics.erasureSuppressed(record: "deadLetter", erased.count)
        for index in batch.indices where !plan.spans.isEmpty && erased.contains(RecordPosition(topic: batch[index].topic, partition: batch[index].partition, offset: batch[index].offset)) {
            plan.spans[index].outcome = "suppressed"
        }
        return true
    }

    // MARK: - Phase 3: publish the dead letters

    /// Those already dead-lettered (a redelivered batch whose transaction committed, or whose letter a partition's
    /// other owner published: `withDeadLetterClaim`) are not published again. The rest are sent together, awaited
    /// together; one the broker acknowledged is never sent again, even if another fails. Their positions are
    /// recorded in the batch transaction. (A crash between the acknowledgement and the claim's commit re-sends once:
    /// `dlq list` and `redrive` dedupe by position.)
    func publishDeadLetters(_ plan: inout Plan, untilDurable: UntilDurable) async -> Bool {
        var published: [DeadLetteredRecord] = []
        var pending = plan.pendingDeadLetters
        var deadLettered = plan.deadLettered
        guard await untilDurable("dead letters", {
            guard !pending.isEmpty else { return }
            let letters = pending
            // Where each acknowledged letter landed, by its index in `letters`.
            let (alreadySent, landed) = try await withDeadline(storeTimeout, "publishing dead letters once") { [store] in
                try await store.withDeadLetterClaim(letters.map(\.record.position)) { alreadySent in
                    let toSend = letters.enumerated().filter { alreadySent[$0.element.record.position] == nil }
                    var landed: [Int: RecordPosition] = [:]
                    for (sent, report) in await send(toSend.map(\.element.letter)) {
                        landed[toSend[sent].offset] = RecordPosition(topic: report.topic, partition: report.partition, offset: report.offset)
                    }
                    return (landed, claims: Dictionary(landed.map { (letters[$0.key].record.position, $0.value) }, uniquingKeysWith: { first, _ in first }))
                }
            }
            // A letter another owner published: its row (written by whichever batch commits first) says where it
            // landed; its headers are that owner's (a re-drive without them carries the traceparent).
            for case let (position, sent?) in alreadySent {
                if let at = deadLettered.firstIndex(where: { $0.position == position }) { deadLettered[at].deadLetterPosition = sent }
            }
            // Each published dead letter keeps where it landed and its headers, so the console re-drives it as
            // `pipelinectl dlq redrive` would (the same record, the same re-drive log).
            for (index, place) in landed {
                var record = letters[index].record
                record.deadLetterPosition = place
                record.deadLetterHeaders = letters[index].letter.headers.map { StoredHeader(key: $0.key, value: $0.value) }
                published.append(record)
                if let at = deadLettered.firstIndex(where: { $0.position == record.position }) { deadLettered[at] = record }
            }
            pending = letters.enumerated().filter { landed[$0.offset] == nil && alreadySent[$0.element.record.position] == nil }.map(\.element)
            if !pending.isEmpty { throw DeadLetterNotAcknowledged(count: pending.count) }
        }) else { return false }
        plan.pendingDeadLetters = []
        plan.deadLettered = deadLettered
        for record in published {
            metrics.deadLettered(code: record.errorCode)
            // The reason is logged, never the payload (and the reason is escaped and bounded by VerificationError).
            var metadata: Logger.Metadata = ["code": "\(record.errorCode)", "partition": "\(record.position.partition)", "offset": "\(record.position.offset)"]
            if let traceId = record.traceId { metadata["trace_id"] = "\(traceId)" }
            logger.warning("dead-lettered a record", metadata: metadata)
        }
        metrics.records("dead_lettered", published.count)
        metrics.records("dead_letter_already_sent", deadLettered.count - published.count)
        return true
    }

    /// Sends every letter at once; the acknowledged ones by index.
    func send(_ letters: [KafkaProducerMessage]) async -> [Int: KafkaDeliveryReport] {
        await withTaskGroup(of: (Int, KafkaDeliveryReport)?.self) { group in
            for (index, letter) in letters.enumerated() {
                group.addTask { [deadLetters] in (try? await deadLetters.sendAndAwait(letter)).map { (index, $0) } }
            }
            var delivered: [Int: KafkaDeliveryReport] = [:]
            for await result in group { if let (index, report) = result { delivered[index] = report } }
            return delivered
        }
    }

    // MARK: - Phase 4: the batch transaction

    /// A permanent refusal (SQLSTATE 22/23: the data, not the database) is isolated by bisecting the batch; the
    /// refused records are dead-lettered as `storeRejected` and the rest stored. Anything else is retried.
    func storeNotifications(_ plan: inout Plan, untilDurable: UntilDurable) async -> Bool {
        var remaining = plan.stored
        var positionsToRecord = plan.deadLettered
        var rejectedPositions: Set<RecordPosition> = []
        var outcome = BatchOutcome()
        var failures = 0
        var transactionStart = plan.transactionStart
        defer { plan.transactionStart = transactionStart }
        guard await untilDurable("notifications", {
            transactionStart = DefaultTracerClock.now
            do {
                // Bounded: while the database is unreachable the pool queues the query instead of failing it; the
                // deadline turns that into a transient failure (not ready, backoff, retry). A transaction that
                // committed just as its deadline passed is harmless: the retry finds every notification in the ledger.
                outcome = try await withDeadline(storeTimeout, "storing the batch") { [store, remaining, positionsToRecord] in
                    try await store.store(remaining, deadLettered: positionsToRecord)
                }
                count(outcome)
            } catch {
                failures += 1
                metrics.consecutiveBatchFailures.set(Double(failures))
                guard case .permanent = StoreFailure(error) else { throw error }
                let (accepted, rejected) = await isolateRejected(remaining)
                for (record, failure) in rejected {
                    guard case .permanent(let state, let message) = failure else { continue }
                    positionsToRecord.append(try await deadLetterRefused(record, sqlState: state, message: message))
                    if let position = positionsToRecord.last?.position { rejectedPositions.insert(position) }
                }
                remaining = accepted
                throw error  // retried at once with what is left: the accepted records and the refused ones' positions
            }
        }) else { return false }
        plan.outcome = outcome
        plan.rejectedPositions = rejectedPositions
        return true
    }

    func count(_ outcome: BatchOutcome) {
        for (kind, count) in outcome.suppressed { metrics.erasureSuppressed(record: kind, count) }
        metrics.records("applied", outcome.applied)
        metrics.records("duplicate", outcome.duplicates)
        metrics.records("stale", outcome.stale)
        metrics.offersRedeemed(outcome.offersRedeemed)
        metrics.consecutiveBatchFailures.set(0.0)
        logger.debug("batch stored", metadata: ["applied": "\(outcome.applied)", "duplicates": "\(outcome.duplicates)"])
    }

    /// Publishes the `storeRejected` dead letter of a record PostgreSQL refuses; the position to record with the batch.
    func deadLetterRefused(_ record: StoredNotification, sqlState state: String, message: String) async throws -> DeadLetteredRecord {
        let position = RecordPosition(topic: record.kafkaTopic ?? "", partition: record.kafkaPartition ?? -1, offset: record.kafkaOffset ?? -1)
        let letter = NotificationRecord.deadLetter(
            of: position, key: nil, value: record.signedPayloadBytes, headers: [], timestamp: nil,
            failure: ("storeRejected", "PostgreSQL refused the record (SQLSTATE \(state)): \(message)", state), consumerGroup: consumerGroup,
            to: deadLetterTopic, now: NotificationRecord.now())
        _ = try await deadLetters.sendAndAwait(letter)
        metrics.deadLettered(code: "storeRejected")
        logger.error("dead-lettered a record PostgreSQL refuses", metadata: ["sqlstate": "\(state)", "partition": "\(position.partition)", "offset": "\(position.offset)"])
        return DeadLetteredRecord(
            position: position, errorCode: "storeRejected", reason: "PostgreSQL refused the record (SQLSTATE \(state))", payload: record.signedPayloadBytes,
            receivedAt: record.receivedAt)
    }

    /// Splits `records` into those PostgreSQL accepts and those it refuses for good, by storing halves in
    /// transactions that are rolled back (`probe`): a batch whose every record is refused costs log2(n) probes per
    /// refused record. Transient errors during the probe count as accepted (the retry sees them).
    func isolateRejected(_ records: [StoredNotification]) async -> (accepted: [StoredNotification], rejected: [(StoredNotification, StoreFailure)]) {
        guard !records.isEmpty else { return ([], []) }
        let failure: StoreFailure
        do {
            try await withDeadline(storeTimeout, "probing part of a refused batch") { [store, records] in try await store.probe(records) }
            return (records, [])
        } catch {
            failure = StoreFailure(error)
        }
        guard case .permanent = failure else { return (records, []) }
        if records.count == 1 { return ([], [(records[0], failure)]) }
        let middle = records.count / 2
        let first = await isolateRejected(Array(records[..<middle]))
        let second = await isolateRejected(Array(records[middle...]))
        return (first.accepted + second.accepted, first.rejected + second.rejected)
    }

    // MARK: - Phase 5: what the trace says of each record

    func describeOutcomes(_ plan: inout Plan) {
        guard !plan.spans.isEmpty else { return }
        for (record, index) in zip(plan.stored, plan.storedIndices) {
            let position = record.position
            plan.spans[index].outcome =
                if let position, plan.rejectedPositions.contains(position) { "dead-lettered" }
                else if plan.outcome.suppressedKeys.contains(record.deduplicationKey) { "suppressed" }
                else if let position, plan.outcome.duplicatePositions.contains(position) { "duplicate" }
                else if plan.outcome.unchangedKeys.contains(record.deduplicationKey) { "unchanged" }
                else { "applied" }
        }
    }
}
