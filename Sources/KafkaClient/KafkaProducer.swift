import CRDKafka
import Foundation
import Logging
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
    private let context: ProducerContext
    /// The librdkafka instance in use, and those retired after a fatal error (closed with the producer).
    private let generations: Mutex<(current: Generation, retired: [Generation])>
    /// Reports of records sent with `send(_:)` (not `sendAndAwait`), in completion order.
    public let deliveryReports: AsyncStream<Result<KafkaDeliveryReport, KafkaError>>
    /// Set when `close()` begins: later sends fail instead of touching a destroyed handle.
    private let closed = Atomic<Bool>(false)

    /// One librdkafka producer instance and the thread that serves its delivery reports.
    final class Generation: Sendable {
        let client: RDKafkaClient
        let pollThread: PollThread
        init(client: RDKafkaClient) {
            self.client = client
            self.pollThread = PollThread(handle: client.handle, name: "kafka-producer-poll")
        }
    }

    public init(configuration: KafkaProducerConfiguration, logger: Logger) throws(KafkaError) {
        let (stream, continuation) = AsyncStream<Result<KafkaDeliveryReport, KafkaError>>.makeStream(bufferingPolicy: .bufferingNewest(100_000))
        let context = ProducerContext(logger: logger, metricsLabel: "producer", reports: continuation)
        self.configuration = configuration
        self.context = context
        self.deliveryReports = stream
        self.generations = Mutex((try Self.makeGeneration(configuration, context), []))
    }

    static func makeGeneration(_ configuration: KafkaProducerConfiguration, _ context: ProducerContext) throws(KafkaError) -> Generation {
        let client = try RDKafkaClient(type: RD_KAFKA_PRODUCER, properties: configuration.properties, context: context) { configuration in
            rd_kafka_conf_set_dr_msg_cb(configuration) { handle, message, _ in
                guard let message, let context = RDKafkaCallbackContext.from(handle) as? ProducerContext else { return }
                let result: Result<KafkaDeliveryReport, KafkaError>
                if message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR {
                    context.brokersReachable.store(true, ordering: .relaxed)
                    let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
                    result = .success(KafkaDeliveryReport(topic: topic, partition: message.pointee.partition, offset: message.pointee.offset))
                } else {
                    result = .failure(KafkaError(message.pointee.err, message: "delivery failed: \(String(cString: rd_kafka_err2str(message.pointee.err)))"))
                }
                if let opaque = message.pointee._private {
                    // sendAndAwait: the waiter was retained when the record was queued; this is its one release.
                    Unmanaged<DeliveryWaiter>.fromOpaque(opaque).takeRetainedValue().continuation.resume(returning: result)
                } else {
                    context.reports.yield(result)
                }
            }
        }
        return Generation(client: client)
    }

    /// The librdkafka instance in use.
    var client: RDKafkaClient { generations.withLock { $0.current.client } }

    /// Queues `message` and waits for the broker's acknowledgement (or the delivery timeout).
    public func sendAndAwait(_ message: KafkaProducerMessage) async throws(KafkaError) -> KafkaDeliveryReport {
        let result: Result<KafkaDeliveryReport, KafkaError> = await withCheckedContinuation { continuation in
            let waiter = DeliveryWaiter(continuation: continuation)
            let opaque = Unmanaged.passRetained(waiter).toOpaque()
            if let error = produce(message, opaque: opaque) {
                Unmanaged<DeliveryWaiter>.fromOpaque(opaque).release()
                continuation.resume(returning: .failure(error))
            }
        }
        return try result.get()
    }

    /// Queues `message`; its report arrives on `deliveryReports`. Fails at once when the local queue is full.
    public func send(_ message: KafkaProducerMessage) throws(KafkaError) {
        if let error = produce(message, opaque: nil) { throw error }
    }

    /// Whether the last contact with the brokers succeeded (for readiness probes).
    public var isBrokerReachable: Bool { context.brokersReachable.load(ordering: .relaxed) }

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
            context.logger.warning("producer closed with records still in flight: \(error)")
        }
        let all = generations.withLock { [$0.current] + $0.retired }
        for generation in all {
            // Whatever is still queued fails its waiter now, instead of waiting forever.
            rd_kafka_purge(generation.client.handle.pointer, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
            await generation.pollThread.stop()
            await generation.client.destroy()
        }
        context.reports.finish()
    }

    /// Replaces a librdkafka instance that hit a fatal error (e.g. an idempotent producer whose broker lost its
    /// producer state). librdkafka's rule for fatal errors is to create a new instance; the old one's queued
    /// records are purged, which fails their waiters (ingest answers 503, Apple retries), and it is destroyed
    /// when the producer closes.
    private func replace(_ failed: Generation) throws(KafkaError) -> Generation {
        try generations.withLock { (state) throws(KafkaError) -> Generation in
            guard state.current === failed else { return state.current }
            var reason = [CChar](repeating: 0, count: 512)
            let code = rd_kafka_fatal_error(failed.client.handle.pointer, &reason, reason.count)
            context.logger.error("producer hit a fatal error \(KafkaError(code, message: String(nulTerminated: reason))); replacing its librdkafka instance")
            let replacement = try Self.makeGeneration(configuration, context)
            rd_kafka_purge(failed.client.handle.pointer, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
            state.retired.append(failed)
            state.current = replacement
            return replacement
        }
    }

    private func produce(_ message: KafkaProducerMessage, opaque: UnsafeMutableRawPointer?) -> KafkaError? {
        guard !closed.load(ordering: .acquiring) else {
            return KafkaError(RD_KAFKA_RESP_ERR__DESTROY, message: "the producer is closed (the process is shutting down)")
        }
        var generation = generations.withLock { $0.current }
        do {
            if rd_kafka_fatal_error(generation.client.handle.pointer, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR {
                generation = try replace(generation)
            }
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

/// The per-record context of `sendAndAwait`, handed to librdkafka as the message opaque.
final class DeliveryWaiter: Sendable {
    let continuation: CheckedContinuation<Result<KafkaDeliveryReport, KafkaError>, Never>
    init(continuation: CheckedContinuation<Result<KafkaDeliveryReport, KafkaError>, Never>) {
        self.continuation = continuation
    }
}

final class ProducerContext: RDKafkaCallbackContext, @unchecked Sendable {
    let reports: AsyncStream<Result<KafkaDeliveryReport, KafkaError>>.Continuation
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
