import CRDKafka
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// A member of a consumer group.
///
/// Offsets move only when the application says its work is durable: `storeOffset(_:)` marks a record done, and
/// only stored offsets are committed (every `autoCommitIntervalMilliseconds`, on `commit()`, and synchronously
/// before a rebalance takes partitions away, so the next owner starts exactly after the last durable record).
///
/// `messages` is pull-based: each `next()` asks librdkafka's own fetch queue for one record, on the consumer's
/// blocking queue. Nothing is buffered on the Swift side, so pausing the loop pauses consumption.
public final class KafkaConsumer: Service, Sendable {
    public let configuration: KafkaConsumerConfiguration
    let client: RDKafkaClient
    /// The consumer's own queue (fetched records and callbacks), for batch polls. Destroyed on close.
    private let consumerQueue: RDKafkaHandle
    let context: ConsumerContext
    /// Partitions assigned to and revoked from this member, in order.
    public let rebalanceEvents: AsyncStream<KafkaRebalanceEvent>
    private let closed = Atomic<Bool>(false)
    /// Calls that use the handle off the serial queue (offset stores, watermark reads) pass through it; `close()`
    /// waits for those inside before the handle is destroyed.
    private let gate = HandleGate()
    /// When each error code was last logged (consumer errors are logged at most once per code every 10 s).
    private let errorLogTimes = Mutex<[Int32: ContinuousClock.Instant]>([:])
    /// Set on the blocking queue right before the group is left: commits queued after that are refused.
    private let closedForCommit = Atomic<Bool>(false)
    private var isClosedForCommit: Bool { closedForCommit.load(ordering: .relaxed) }

    /// Creates the member and subscribes it to `topics`.
    public init(configuration: KafkaConsumerConfiguration, topics: [String], logger: Logger) throws(KafkaError) {
        let (stream, continuation) = AsyncStream<KafkaRebalanceEvent>.makeStream()
        let context = ConsumerContext(
            logger: logger, metricsLabel: "consumer", events: continuation,
            configuredCooperative: configuration.properties["partition.assignment.strategy"] == "cooperative-sticky")
        self.configuration = configuration
        self.context = context
        self.rebalanceEvents = stream
        self.client = try RDKafkaClient(type: RD_KAFKA_CONSUMER, properties: configuration.properties, context: context) { configuration in
            rd_kafka_conf_set_rebalance_cb(configuration) { handle, error, partitions, _ in
                guard let handle, let partitions, let context = RDKafkaCallbackContext.from(handle) as? ConsumerContext else { return }
                context.rebalance(handle: handle, error: error, partitions: partitions)
            }
        }
        // Serve every callback (rebalance, logs, errors) from the consumer's poll.
        rd_kafka_poll_set_consumer(client.handle.pointer)
        consumerQueue = RDKafkaHandle(pointer: rd_kafka_queue_get_consumer(client.handle.pointer)!)
        let list = rd_kafka_topic_partition_list_new(Int32(topics.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in topics { rd_kafka_topic_partition_list_add(list, topic, RD_KAFKA_PARTITION_UA) }
        let error = rd_kafka_subscribe(client.handle.pointer, list)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, message: "subscribe to \(topics) failed") }
    }

    /// The records of the subscribed topics, in order per partition.
    public var messages: KafkaConsumerMessages { KafkaConsumerMessages(consumer: self) }

    /// Polls once, waiting at most `timeoutMilliseconds`; nil when nothing arrived. Transient errors are logged
    /// and swallowed (librdkafka recovers by itself); fatal ones are thrown.
    public func poll(timeoutMilliseconds: Int32 = 100) async throws(KafkaError) -> KafkaConsumerMessage? {
        try await pollBatch(maximum: 1, timeoutMilliseconds: timeoutMilliseconds).first
    }

    /// Polls up to `maximum` records at once, waiting at most `timeoutMilliseconds` for the first; empty when
    /// nothing arrived. One hop to the blocking queue per batch instead of per record.
    public func pollBatch(maximum: Int = 500, timeoutMilliseconds: Int32 = 100) async throws(KafkaError) -> [KafkaConsumerMessage] {
        guard !closed.load(ordering: .relaxed), maximum > 0 else { return [] }
        let queue = consumerQueue
        let result: Result<[KafkaConsumerMessage], KafkaError> = await client.blocking { [self] _ in
            // Checked again on the serial queue: a poll that passed the check above may run after close().
            guard !closed.load(ordering: .relaxed) else { return .success([]) }
            // rd_kafka_consume_batch_queue waits for a *full* batch until its timeout; so wait for the first record
            // only, then take whatever else is already queued without waiting.
            var pointers = [UnsafeMutablePointer<rd_kafka_message_t>?](repeating: nil, count: maximum)
            var count = pointers.withUnsafeMutableBufferPointer { rd_kafka_consume_batch_queue(queue.pointer, 0, $0.baseAddress, maximum) }
            if count == 0 {
                count = pointers.withUnsafeMutableBufferPointer { rd_kafka_consume_batch_queue(queue.pointer, Int32(timeoutMilliseconds), $0.baseAddress, 1) }
                if count == 1, maximum > 1 {
                    let more = pointers.withUnsafeMutableBufferPointer {
                        rd_kafka_consume_batch_queue(queue.pointer, 0, $0.baseAddress! + 1, maximum - 1)
                    }
                    if more > 0 { count += more }
                }
            }
            guard count >= 0 else { return .failure(KafkaError(rd_kafka_last_error(), message: "batch poll failed")) }
            var messages: [KafkaConsumerMessage] = []
            messages.reserveCapacity(count)
            var fatal: KafkaError?
            var topicNames = TopicNameCache()
            for pointer in pointers.prefix(count) {
                guard let pointer else { continue }
                defer { rd_kafka_message_destroy(pointer) }
                if pointer.pointee.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                    // An error event in the record stream (missing topic, denied ACL, failed offset fetch, or a
                    // fatal one such as a fenced static member): never a record, always reported.
                    var error = KafkaError(pointer.pointee.err, message: KafkaConsumer.errorText(pointer))
                    if rd_kafka_fatal_error(client.handle.pointer, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR { error.isFatal = true }
                    reportConsumerError(error)
                    if error.isFatal { fatal = error }
                    continue
                }
                messages.append(KafkaConsumer.copy(pointer, topicNames: &topicNames))
            }
            if let fatal { return .failure(fatal) }
            return .success(messages)
        }
        let messages = try result.get()
        if !messages.isEmpty { context.brokersReachable.store(true, ordering: .relaxed) }
        return messages
    }

    /// Counts a consumer error (`kafka_consumer_errors_total{code}`) and logs it, at most once per code every 10 s.
    func reportConsumerError(_ error: KafkaError) {
        Counter(label: "kafka_consumer_errors_total", dimensions: [("code", error.name), ("fatal", String(error.isFatal))]).increment()
        let now = ContinuousClock.now
        let log = errorLogTimes.withLock { times in
            if let last = times[error.code], now - last < .seconds(10), !error.isFatal { return false }
            times[error.code] = now
            return true
        }
        guard log else { return }
        if error.isFatal {
            context.logger.critical("fatal consumer error: \(error); this member can no longer consume")
        } else {
            context.logger.warning("consumer error (repeats of this code are not logged for 10 s): \(error)")
        }
    }

    /// The error text librdkafka attached to an error event (`rd_kafka_message_errstr`).
    static func errorText(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> String {
        if let text = rd_kafka_message_errstr(message) { return String(cString: text) }
        return String(cString: rd_kafka_err2str(message.pointee.err))
    }

    /// Asks the cluster for metadata (a cheap request): true, and `isBrokerReachable` set again, when a broker
    /// answered. A quiet member (nothing to fetch) learns this way that its brokers are back.
    public func checkBrokerReachable(timeoutMilliseconds: Int32 = 1_000) async -> Bool {
        guard !closed.load(ordering: .relaxed) else { return false }
        return (try? await client.metadata(timeoutMilliseconds: timeoutMilliseconds)) != nil
    }

    /// Marks `message` done: its offset + 1 is what the group will commit for its partition.
    public func storeOffset(_ message: KafkaConsumerMessage) throws(KafkaError) {
        try storeOffsets([message.topicPartition: message.offset + 1])
    }

    /// Marks the given next offsets to commit, per partition.
    public func storeOffsets(_ offsets: [KafkaTopicPartition: Int64]) throws(KafkaError) {
        guard !closed.load(ordering: .acquiring), gate.enter() else { throw Self.closedError }
        defer { gate.leave() }
        let list = Array(offsets.keys).makeList(offsets: offsets)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let error = rd_kafka_offsets_store(client.handle.pointer, list)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(error, message: "storing offsets failed (partition no longer assigned?): \(String(cString: rd_kafka_err2str(error)))")
        }
        for entry in list.entries where entry.error != RD_KAFKA_RESP_ERR_NO_ERROR {
            throw KafkaError(entry.error, message: "storing the offset of \(entry.partition) failed: \(String(cString: rd_kafka_err2str(entry.error)))")
        }
    }

    /// Commits every stored offset now and waits for the broker. Nothing stored is not an error.
    public func commit() async throws(KafkaError) {
        let error = await client.blocking { [self] handle in
            // On the serial queue, so never after the handle was destroyed; close() itself commits first.
            isClosedForCommit ? RD_KAFKA_RESP_ERR__DESTROY : rd_kafka_commit(handle, nil, 0)
        }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR || error == RD_KAFKA_RESP_ERR__NO_OFFSET else {
            throw KafkaError(error, message: "commit failed: \(String(cString: rd_kafka_err2str(error)))")
        }
    }

    /// Commits exactly `offsets` (the next record to process, per partition) and waits for the broker.
    ///
    /// Unlike `commit()`, which commits what was stored and which librdkafka skips for a partition whose stored
    /// offset is not above the committed one (`_NO_OFFSET`), an explicit list moves offsets backwards too: what
    /// a replay needs. Every partition's own result is checked.
    public func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws(KafkaError) {
        let result: Result<Void, KafkaError> = await client.blocking { [self] handle in
            guard !isClosedForCommit else { return .failure(Self.closedError) }
            let list = Array(offsets.keys).makeList(offsets: offsets)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_commit(handle, list, 0)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
                return .failure(KafkaError(error, message: "commit of \(offsets.count) offsets failed: \(String(cString: rd_kafka_err2str(error)))"))
            }
            for entry in list.entries where entry.error != RD_KAFKA_RESP_ERR_NO_ERROR {
                return .failure(KafkaError(entry.error, message: "commit of \(entry.partition) failed: \(String(cString: rd_kafka_err2str(entry.error)))"))
            }
            return .success(())
        }
        try result.get()
    }

    /// The group's committed offsets for `partitions`, as the broker has them now (nil: none committed).
    public func committed(_ partitions: [KafkaTopicPartition], timeoutMilliseconds: Int32 = 10_000) async throws(KafkaError) -> [KafkaTopicPartition: Int64?] {
        let result: Result<[KafkaTopicPartition: Int64?], KafkaError> = await client.blocking { [self] handle in
            guard !isClosedForCommit else { return .failure(Self.closedError) }
            let list = partitions.makeList()
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_committed(handle, list, timeoutMilliseconds)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { return .failure(KafkaError(error, message: "reading committed offsets failed")) }
            var offsets: [KafkaTopicPartition: Int64?] = [:]
            for entry in list.entries {
                if entry.error != RD_KAFKA_RESP_ERR_NO_ERROR { return .failure(KafkaError(entry.error, message: "committed offset of \(entry.partition)")) }
                offsets[entry.partition] = entry.offset >= 0 ? entry.offset : nil
            }
            return .success(offsets)
        }
        return try result.get()
    }

    /// The partitions currently assigned to this member.
    public func assignment() async throws(KafkaError) -> [KafkaTopicPartition] {
        let result: Result<[KafkaTopicPartition], KafkaError> = await client.blocking { handle in
            var list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
            let error = rd_kafka_assignment(handle, &list)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let list else { return .failure(KafkaError(error)) }
            defer { rd_kafka_topic_partition_list_destroy(list) }
            return .success(list.entries.map(\.partition).sorted())
        }
        return try result.get()
    }

    /// Stops fetching from `partitions` (the group keeps them assigned to this member). On the serial queue,
    /// like the batch poll: never in parallel with `rd_kafka_consume_batch_queue` (librdkafka 2.0 lost records
    /// when the two overlapped), never after the handle was destroyed.
    public func pause(_ partitions: [KafkaTopicPartition]) async throws(KafkaError) {
        try await setPaused(true, partitions)
    }

    /// Fetches from `partitions` again (on the serial queue, like `pause`).
    public func resume(_ partitions: [KafkaTopicPartition]) async throws(KafkaError) {
        try await setPaused(false, partitions)
    }

    private func setPaused(_ paused: Bool, _ partitions: [KafkaTopicPartition]) async throws(KafkaError) {
        let error = await client.blocking { [self] handle in
            guard !isClosedForCommit else { return RD_KAFKA_RESP_ERR__DESTROY }
            let list = partitions.makeList()
            defer { rd_kafka_topic_partition_list_destroy(list) }
            return paused ? rd_kafka_pause_partitions(handle, list) : rd_kafka_resume_partitions(handle, list)
        }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error) }
    }

    /// Makes the next record fetched from `partition` the one at `offset` (e.g. to retry a batch in place).
    public func seek(_ partition: KafkaTopicPartition, to offset: Int64, timeoutMilliseconds: Int32 = 5_000) async throws(KafkaError) {
        let result: Result<Void, KafkaError> = await client.blocking { handle in
            let list = [partition].makeList(offsets: [partition: offset])
            defer { rd_kafka_topic_partition_list_destroy(list) }
            if let error = rd_kafka_seek_partitions(handle, list, timeoutMilliseconds) { return .failure(KafkaError(consuming: error)) }
            if let entry = list.entries.first, entry.error != RD_KAFKA_RESP_ERR_NO_ERROR { return .failure(KafkaError(entry.error)) }
            return .success(())
        }
        try result.get()
    }

    /// The partition's end offset as last reported by fetch responses (librdkafka's cache: no broker round
    /// trip, so it can be read after every batch). Nil before the first fetch from the partition.
    public func cachedHighWatermark(_ partition: KafkaTopicPartition) -> Int64? {
        guard !closed.load(ordering: .acquiring), gate.enter() else { return nil }
        defer { gate.leave() }
        var low: Int64 = -1
        var high: Int64 = -1
        let error = rd_kafka_get_watermark_offsets(client.handle.pointer, partition.topic, partition.partition, &low, &high)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR, high >= 0 else { return nil }
        return high
    }

    public var isBrokerReachable: Bool { context.brokersReachable.load(ordering: .relaxed) }

    static let closedError = KafkaError(RD_KAFKA_RESP_ERR__DESTROY, message: "the consumer is closed (it left its group)")

    /// Runs until graceful shutdown (or cancellation), then leaves the group cleanly.
    public func run() async throws {
        try? await gracefulShutdown()
        await close()
    }

    /// Commits stored offsets, leaves the group (its partitions are revoked, committing once more) and destroys
    /// the handle. Idempotent.
    ///
    /// After a fatal error (e.g. a fenced static member) the instance can neither commit nor leave: both are
    /// skipped and the handle is destroyed without the consumer close, which would otherwise wait for a group
    /// that fenced us. What was not committed is redelivered to the member that replaces us.
    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let fatal = await client.blocking { handle in rd_kafka_fatal_error(handle, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR }
        if !fatal {
            do { try await commit() } catch { context.logger.warning("final commit failed: \(error)") }
        }
        let queue = consumerQueue
        let error = await client.blocking { [self] handle in
            closedForCommit.store(true, ordering: .relaxed)
            rd_kafka_queue_destroy(queue.pointer)
            return fatal ? RD_KAFKA_RESP_ERR_NO_ERROR : rd_kafka_consumer_close(handle)
        }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { context.logger.warning("leaving the group failed: \(KafkaError(error))") }
        context.events.finish()
        await gate.close()  // no offset store or watermark read is inside the handle from here on
        await client.destroy(flags: fatal ? Int32(RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE) : 0)
    }

    /// The last topic handle's name: records of one batch nearly always share a topic.
    struct TopicNameCache {
        var handle: OpaquePointer?
        var name = ""

        mutating func name(of topic: OpaquePointer?) -> String {
            guard let topic else { return "" }
            if topic != handle {
                handle = topic
                name = String(cString: rd_kafka_topic_name(topic))
            }
            return name
        }
    }

    static func copy(_ message: UnsafeMutablePointer<rd_kafka_message_t>, topicNames: inout TopicNameCache) -> KafkaConsumerMessage {
        let m = message.pointee
        let value = m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: m.len)) } ?? []
        let key = m.key.map { Array(UnsafeRawBufferPointer(start: $0, count: m.key_len)) }
        var headers: [KafkaHeader] = []
        var list: OpaquePointer?
        if rd_kafka_message_headers(message, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list {
            var index = 0
            var name: UnsafePointer<CChar>?
            var bytes: UnsafeRawPointer?
            var size = 0
            while rd_kafka_header_get_all(list, index, &name, &bytes, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(KafkaHeader(key: name.map { String(cString: $0) } ?? "", value: bytes.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }))
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        return KafkaConsumerMessage(
            topic: topicNames.name(of: m.rkt), partition: m.partition, offset: m.offset,
            key: key, value: value, headers: headers, timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp)
    }
}

/// The consumer's records as an AsyncSequence. Ends when the consumer closes or the task is cancelled.
public struct KafkaConsumerMessages: AsyncSequence, Sendable {
    public typealias Element = KafkaConsumerMessage
    let consumer: KafkaConsumer

    public struct AsyncIterator: AsyncIteratorProtocol {
        let consumer: KafkaConsumer
        /// At most one batch, taken from librdkafka's queue when the previous one is used up.
        var batch: [KafkaConsumerMessage] = []
        var position = 0

        public mutating func next() async throws -> KafkaConsumerMessage? {
            while position == batch.count {
                guard !Task.isCancelled, !consumer.isClosed else { return nil }
                batch = try await consumer.pollBatch(maximum: 256, timeoutMilliseconds: 100)
                position = 0
            }
            defer { position += 1 }
            return batch[position]
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(consumer: consumer) }
}

extension KafkaConsumer {
    var isClosed: Bool { closed.load(ordering: .relaxed) }
}

final class ConsumerContext: RDKafkaCallbackContext, @unchecked Sendable {
    let events: AsyncStream<KafkaRebalanceEvent>.Continuation
    /// The protocol our assignment strategy implies, for when librdkafka cannot say.
    let configuredCooperative: Bool

    init(logger: Logger, metricsLabel: String, events: AsyncStream<KafkaRebalanceEvent>.Continuation, configuredCooperative: Bool) {
        self.events = events
        self.configuredCooperative = configuredCooperative
        super.init(logger: logger, metricsLabel: metricsLabel)
    }

    /// Runs inside `rd_kafka_consumer_poll` on the consumer's blocking queue. On revoke, stored offsets are
    /// committed synchronously *before* the partitions are released, so the next owner resumes exactly after
    /// the last durable record and no record is owned by two members after a commit.
    func rebalance(handle: OpaquePointer, error: rd_kafka_resp_err_t, partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) {
        // `rd_kafka_rebalance_protocol` is NULL while the group is not (or no longer) joined, as during close: the
        // revoke of a leaving member then arrives with no protocol to read (a NULL read as a string crashed a test run).
        let cooperative = rd_kafka_rebalance_protocol(handle).map { String(cString: $0) == "COOPERATIVE" } ?? configuredCooperative
        let affected = partitions.entries.map(\.partition).sorted()
        switch error {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            if cooperative {
                if let failure = rd_kafka_incremental_assign(handle, partitions) { logger.error("incremental assign failed: \(KafkaError(consuming: failure))") }
            } else {
                let result = rd_kafka_assign(handle, partitions)
                if result != RD_KAFKA_RESP_ERR_NO_ERROR { logger.error("assign failed: \(KafkaError(result))") }
            }
            logger.info("partitions assigned: \(affected.map(\.description).joined(separator: ", "))")
            events.yield(.assigned(affected))
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            // A lost assignment (session timed out, fenced) already belongs to someone else: committing for it
            // would at best fail and at worst move the new owner's position.
            if rd_kafka_assignment_lost(handle) != 0 {
                logger.warning("assignment lost (session timeout or fencing): not committing for it; records after the last commit will be redelivered")
            } else {
                let commit = rd_kafka_commit(handle, nil, 0)
                if commit != RD_KAFKA_RESP_ERR_NO_ERROR && commit != RD_KAFKA_RESP_ERR__NO_OFFSET {
                    logger.warning("commit before revoke failed (records after the last commit will be redelivered): \(KafkaError(commit))")
                }
            }
            if cooperative {
                if let failure = rd_kafka_incremental_unassign(handle, partitions) { logger.error("incremental unassign failed: \(KafkaError(consuming: failure))") }
            } else {
                _ = rd_kafka_assign(handle, nil)
            }
            logger.info("partitions revoked: \(affected.map(\.description).joined(separator: ", "))")
            events.yield(.revoked(affected))
        default:
            logger.error("rebalance error \(KafkaError(error)); releasing the assignment")
            if cooperative {
                // Eager `assign(NULL)` is invalid under the cooperative protocol.
                if let failure = rd_kafka_incremental_unassign(handle, partitions) { logger.error("incremental unassign failed: \(KafkaError(consuming: failure))") }
            } else {
                _ = rd_kafka_assign(handle, nil)
            }
            events.yield(.revoked(affected))
        }
    }
}
