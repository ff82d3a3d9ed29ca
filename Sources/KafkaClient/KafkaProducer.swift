import CRDKafka
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Produces records with per-record delivery reports.
///
/// `sendAndAwait(_:)` returns only once the broker acknowledged the record (with `acks=all`, every in-sync
/// replica has it) or librdkafka gave up within `deliveryTimeoutMilliseconds`: that is the guarantee ingest's
/// "200 only after the write is durable" rests on. As a `Service`, it runs until graceful shutdown, then flushes
/// what is in flight and closes; `close()` does the same for code that runs it outside a ServiceGroup.
///
/// Delivery reports are served by a dedicated poll thread (`rd_kafka_poll`), never the cooperative pool.
public final class KafkaProducer: Service, Sendable {
    public let configuration: KafkaProducerConfiguration
    private let logger: Logger
    private let reports: AsyncStream<Result<KafkaDeliveryReport, KafkaError>>.Continuation
    /// The librdkafka instance in use, and those retired after a fatal error and not destroyed yet.
    private let generations: Mutex<(current: Generation, retired: [Generation])>
    /// Reports of records sent with `send(_:)` (not `sendAndAwait`), in completion order.
    public let deliveryReports: AsyncStream<Result<KafkaDeliveryReport, KafkaError>>
    /// Set when `close()` begins: later sends fail instead of touching a destroyed handle.
    private let closed = Atomic<Bool>(false)
    /// Sends pass through it; `close()` waits for those inside before destroying any handle.
    private let gate = HandleGate()
    /// How many librdkafka instances were replaced after a fatal error (also `kafka_producer_replacements_total`).
    private let replacementCount = Atomic<Int>(0)

    /// One librdkafka producer instance, its callback context and the thread that serves its delivery reports.
    final class Generation: Sendable {
        let client: RDKafkaClient
        let context: ProducerContext
        let pollThread: PollThread
        init(client: RDKafkaClient, context: ProducerContext) {
            self.client = client
            self.context = context
            self.pollThread = PollThread(handle: client.handle, name: "kafka-producer-poll")
        }

        /// librdkafka raised a fatal error on this instance, or a delivery report showed that the broker no
        /// longer accepts its producer id (fenced): it can never deliver again and must be replaced.
        var isUnusable: Bool {
            context.fenced.load(ordering: .relaxed) || rd_kafka_fatal_error(client.handle.pointer, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR
        }
    }

    public init(configuration: KafkaProducerConfiguration, logger: Logger) throws(KafkaError) {
        let (stream, continuation) = AsyncStream<Result<KafkaDeliveryReport, KafkaError>>.makeStream(bufferingPolicy: .bufferingNewest(100_000))
        self.configuration = configuration
        self.logger = logger
        self.reports = continuation
        self.deliveryReports = stream
        self.generations = Mutex((try Self.makeGeneration(configuration, logger: logger, reports: continuation), []))
    }

    /// Broker error codes that mean the idempotent producer's id or epoch is no longer accepted. librdkafka
    /// raises most of them as fatal errors; a broker that answers them on a plain produce (tansu restarted from
    /// its stored state answers PRODUCER_FENCED) leaves an instance that retries in vain, so they retire it too.
    static let fencingCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR__FATAL, RD_KAFKA_RESP_ERR_PRODUCER_FENCED, RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH,
        RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
        RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING,
    ].reduce(into: Set<Int32>()) { $0.insert($1.rawValue) }

    static func makeGeneration(
        _ configuration: KafkaProducerConfiguration, logger: Logger, reports: AsyncStream<Result<KafkaDeliveryReport, KafkaError>>.Continuation
    ) throws(KafkaError) -> Generation {
        let context = ProducerContext(logger: logger, metricsLabel: "producer", reports: reports)
        let client = try RDKafkaClient(type: RD_KAFKA_PRODUCER, properties: configuration.properties, context: context) { configuration in
            rd_kafka_conf_set_dr_msg_cb(configuration) { handle, message, _ in
                guard let message, let context = RDKafkaCallbackContext.from(handle) as? ProducerContext else { return }
                let result: Result<KafkaDeliveryReport, KafkaError>
                let code = message.pointee.err
                if code == RD_KAFKA_RESP_ERR_NO_ERROR {
                    context.brokersReachable.store(true, ordering: .relaxed)
                    let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
                    result = .success(KafkaDeliveryReport(topic: topic, partition: message.pointee.partition, offset: message.pointee.offset))
                } else if KafkaProducer.fencingCodes.contains(code.rawValue) || rd_kafka_fatal_error(handle, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR {
                    // Not stored, and this instance never will store anything again; the next send runs on a new
                    // one. For the caller that is a passing condition: retry (ingest answers 503, Apple retries).
                    context.fenced.store(true, ordering: .relaxed)
                    result = .failure(KafkaError(
                        code: code.rawValue, message: "not stored: the producer instance was fenced or hit a fatal error (\(String(cString: rd_kafka_err2str(code)))); it is replaced, retry",
                        isRetriable: true))
                } else {
                    result = .failure(KafkaError(code, message: "delivery failed: \(String(cString: rd_kafka_err2str(code)))"))
                }
                if let opaque = message.pointee._private {
                    // sendAndAwait: the waiter was retained when the record was queued; this is its one release.
                    Unmanaged<DeliveryWaiter>.fromOpaque(opaque).takeRetainedValue().complete(result)
                } else {
                    context.reports.yield(result)
                }
            }
        }
        return Generation(client: client, context: context)
    }

    /// The librdkafka instance in use.
    var client: RDKafkaClient { generations.withLock { $0.current.client } }

    /// How many librdkafka instances were replaced after a fatal error since this producer was created.
    public var replacements: Int { replacementCount.load(ordering: .relaxed) }

    /// Queues `message` and waits for the broker's acknowledgement (or the delivery timeout).
    ///
    /// A record in flight when the instance hits a fatal error fails with a retriable error (never a success
    /// without a stored record); the next call runs on a fresh instance.
    public func sendAndAwait(_ message: KafkaProducerMessage) async throws(KafkaError) -> KafkaDeliveryReport {
        await destroyDrainedGenerations()
        let result: Result<KafkaDeliveryReport, KafkaError> = await withCheckedContinuation { continuation in
            let waiter = DeliveryWaiter { continuation.resume(returning: $0) }
            let opaque = Unmanaged.passRetained(waiter).toOpaque()
            if let error = produce(message, opaque: opaque) {
                Unmanaged<DeliveryWaiter>.fromOpaque(opaque).release()
                continuation.resume(returning: .failure(error))
            }
        }
        return try result.get()
    }

    /// Queues all of `messages` at once and waits for every acknowledgement; throws the first failure (the
    /// others are still awaited, so none is left in flight). For tools that count a batch only when all of it
    /// was stored (a backfill page, a reconcile's snapshots).
    public func sendAllAndAwait(_ messages: [KafkaProducerMessage]) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for message in messages {
                group.addTask { _ = try await self.sendAndAwait(message) }
            }
            try await group.waitForAll()
        }
    }

    /// Queues `messages` one after the other, from one thread, in the order given (so records of one key keep
    /// that order in their partition), then waits for every report. Stops queuing at the first record that
    /// cannot be queued: it and every later one fail with that error, so no record is queued after a gap.
    /// Returns one result per message, in order.
    public func sendInOrderAndAwait(_ messages: [KafkaProducerMessage]) async -> [Result<KafkaDeliveryReport, KafkaError>] {
        guard !messages.isEmpty else { return [] }
        await destroyDrainedGenerations()
        return await withCheckedContinuation { continuation in
            let collector = DeliveryCollector(count: messages.count, continuation: continuation)
            for (index, message) in messages.enumerated() {
                let waiter = DeliveryWaiter { collector.complete(index, $0) }
                let opaque = Unmanaged.passRetained(waiter).toOpaque()
                if let error = produce(message, opaque: opaque) {
                    Unmanaged<DeliveryWaiter>.fromOpaque(opaque).release()
                    for later in index..<messages.count { collector.complete(later, .failure(error)) }
                    return
                }
            }
        }
    }

    /// Queues `message`; its report arrives on `deliveryReports`. Fails at once when the local queue is full.
    public func send(_ message: KafkaProducerMessage) throws(KafkaError) {
        if let error = produce(message, opaque: nil) { throw error }
    }

    /// Whether the last contact with the brokers succeeded (for readiness probes).
    public var isBrokerReachable: Bool { generations.withLock { $0.current.context }.brokersReachable.load(ordering: .relaxed) }

    /// Asks the cluster for metadata: succeeds only when a broker answers within the timeout.
    public func checkBrokerReachable(timeoutMilliseconds: Int32 = 2_000) async -> Bool {
        (try? await client.metadata(timeoutMilliseconds: timeoutMilliseconds)) != nil
    }

    /// Waits until every queued record is acknowledged or failed, at most `timeoutMilliseconds`.
    public func flush(timeoutMilliseconds: Int32) async throws(KafkaError) {
        let error = await client.blocking { handle in rd_kafka_flush(handle, timeoutMilliseconds) }
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(error, message: "flush did not complete: \(String(cString: rd_kafka_err2str(error)))") }
    }

    /// Runs until graceful shutdown (or cancellation), then flushes and closes.
    public func run() async throws {
        try? await gracefulShutdown()
        await close()
    }

    /// Flushes in-flight records (bounded by `flushTimeoutMilliseconds`), stops the poll threads, destroys the
    /// handles. Records not acknowledged by then fail their waiters. Idempotent.
    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        do {
            try await flush(timeoutMilliseconds: Int32(configuration.flushTimeoutMilliseconds))
        } catch {
            logger.warning("producer closed with records still in flight: \(error)")
        }
        await gate.close()  // no send is inside a handle from here on
        let all = generations.withLock { [$0.current] + $0.retired }
        for generation in all { await Self.destroy(generation) }
        reports.finish()
    }

    /// Fails whatever is still queued on `generation` (its waiters are answered), stops its poll thread after
    /// the last report was served, and destroys its handle.
    private static func destroy(_ generation: Generation) async {
        rd_kafka_purge(generation.client.handle.pointer, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
        await generation.pollThread.stop()
        await generation.client.destroy()
    }

    /// Destroys retired instances whose every record has been reported (so no waiter is left behind).
    private func destroyDrainedGenerations() async {
        let drained: [Generation] = generations.withLock { state in
            guard !state.retired.isEmpty else { return [] }
            var done: [Generation] = []
            state.retired.removeAll { generation in
                let drained = rd_kafka_outq_len(generation.client.handle.pointer) == 0
                if drained { done.append(generation) }
                return drained
            }
            return done
        }
        for generation in drained { await Self.destroy(generation) }
    }

    /// Replaces a librdkafka instance that can no longer deliver (fatal error, fenced producer id).
    /// librdkafka's rule for fatal errors is to create a new instance; the new one is created outside the lock,
    /// the old one's queued records are purged (their waiters fail retriably: ingest answers 503, Apple
    /// retries) and it is destroyed once its reports were served.
    private func replace(_ failed: Generation) throws(KafkaError) -> Generation {
        let replacement = try Self.makeGeneration(configuration, logger: logger, reports: reports)
        let installed: Generation? = generations.withLock { state in
            guard state.current === failed else {
                // Another caller replaced it first: this unused spare is destroyed with the drained ones.
                state.retired.append(replacement)
                return nil
            }
            state.retired.append(failed)
            state.current = replacement
            return replacement
        }
        guard let installed else { return generations.withLock { $0.current } }
        var reason = [CChar](repeating: 0, count: 512)
        let code = rd_kafka_fatal_error(failed.client.handle.pointer, &reason, reason.count)
        let cause = code == RD_KAFKA_RESP_ERR_NO_ERROR ? "the broker fenced its producer id" : "\(KafkaError(code, message: String(nulTerminated: reason)))"
        logger.error("producer instance replaced: \(cause)")
        replacementCount.add(1, ordering: .relaxed)
        Counter(label: "kafka_producer_replacements_total").increment()
        rd_kafka_purge(failed.client.handle.pointer, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
        return installed
    }

    private func produce(_ message: KafkaProducerMessage, opaque: UnsafeMutableRawPointer?) -> KafkaError? {
        guard !closed.load(ordering: .acquiring), gate.enter() else {
            return KafkaError(RD_KAFKA_RESP_ERR__DESTROY, message: "the producer is closed (the process is shutting down)")
        }
        defer { gate.leave() }
        var generation = generations.withLock { $0.current }
        do {
            if generation.isUnusable { generation = try replace(generation) }
            let error = produce(message, opaque: opaque, on: generation.client)
            guard error?.code == RD_KAFKA_RESP_ERR__FATAL.rawValue else { return error }
            return produce(message, opaque: opaque, on: try replace(generation).client)
        } catch {
            return error
        }
    }

    private func produce(_ message: KafkaProducerMessage, opaque: UnsafeMutableRawPointer?, on client: RDKafkaClient) -> KafkaError? {
        let headers: OpaquePointer? = message.headers.isEmpty ? nil : rd_kafka_headers_new(message.headers.count)
        for header in message.headers {
            if let value = header.value {
                _ = value.withUnsafeBytes { rd_kafka_header_add(headers, header.key, -1, $0.baseAddress, $0.count) }
            } else {
                rd_kafka_header_add(headers, header.key, -1, nil, 0)
            }
        }
        let error = message.value.withUnsafeBytes { value in
            (message.key ?? []).withUnsafeBytes { key in
                crdkafka_produce(
                    client.handle.pointer, message.topic, message.partition ?? RD_KAFKA_PARTITION_UA,
                    value.baseAddress, value.count, message.key == nil ? nil : key.baseAddress, message.key == nil ? 0 : key.count,
                    headers, message.timestamp ?? 0, opaque)
            }
        }
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            if let headers { rd_kafka_headers_destroy(headers) }
            return KafkaError(error, message: "could not queue the record: \(String(cString: rd_kafka_err2str(error)))")
        }
        return nil
    }
}

/// The per-record context of `sendAndAwait`, handed to librdkafka as the message opaque: called once, with
/// the record's delivery report.
final class DeliveryWaiter: Sendable {
    let complete: @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    init(_ complete: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void) {
        self.complete = complete
    }
}

/// Gathers the reports of `sendInOrderAndAwait`'s records and resumes its caller after the last one.
final class DeliveryCollector: Sendable {
    private let state: Mutex<(results: [Result<KafkaDeliveryReport, KafkaError>?], remaining: Int)>
    private let continuation: CheckedContinuation<[Result<KafkaDeliveryReport, KafkaError>], Never>

    init(count: Int, continuation: CheckedContinuation<[Result<KafkaDeliveryReport, KafkaError>], Never>) {
        self.state = Mutex((Array(repeating: nil, count: count), count))
        self.continuation = continuation
    }

    func complete(_ index: Int, _ result: Result<KafkaDeliveryReport, KafkaError>) {
        let finished: [Result<KafkaDeliveryReport, KafkaError>]? = state.withLock { state in
            guard state.results[index] == nil else { return nil }
            state.results[index] = result
            state.remaining -= 1
            return state.remaining == 0 ? state.results.map { $0! } : nil
        }
        if let finished { continuation.resume(returning: finished) }
    }
}

final class ProducerContext: RDKafkaCallbackContext, @unchecked Sendable {
    let reports: AsyncStream<Result<KafkaDeliveryReport, KafkaError>>.Continuation
    /// Set by a delivery report that shows the instance fenced: it is replaced before the next record.
    let fenced = Atomic<Bool>(false)
    init(logger: Logger, metricsLabel: String, reports: AsyncStream<Result<KafkaDeliveryReport, KafkaError>>.Continuation) {
        self.reports = reports
        super.init(logger: logger, metricsLabel: metricsLabel)
    }
}

/// A thread that serves a handle's callbacks with `rd_kafka_poll` until stopped.
final class PollThread: Sendable {
    private let running = Atomic<Bool>(true)
    private let finished = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let done = Atomic<Bool>(false)

    init(handle: RDKafkaHandle, name: String) {
        let thread = Thread { [self] in
            while running.load(ordering: .relaxed) {
                rd_kafka_poll(handle.pointer, 100)
            }
            rd_kafka_poll(handle.pointer, 0)
            finished.withLock { slot in
                done.store(true, ordering: .releasing)
                slot?.resume()
                slot = nil
            }
        }
        thread.name = name
        thread.start()
    }

    /// Stops polling and waits for the thread's last poll.
    func stop() async {
        running.store(false, ordering: .relaxed)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let alreadyDone = finished.withLock { slot -> Bool in
                if done.load(ordering: .acquiring) { return true }  // checked under the lock the thread sets it under
                slot = continuation
                return false
            }
            if alreadyDone { continuation.resume() }
        }
    }
}
