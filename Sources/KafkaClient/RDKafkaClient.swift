import CRDKafka
import Dispatch
import Foundation
import Logging
import Metrics
import Synchronization

/// The librdkafka the process runs on (which may differ from the headers it was compiled against).
public enum Librdkafka {
    /// e.g. `2.16.0`.
    public static var version: String { String(cString: rd_kafka_version_str()) }

    /// librdkafka before 2.2 mis-parses ApiVersion responses with tagged fields and cannot talk to some
    /// Kafka-protocol brokers (tansu, newer Apache Kafka): the handshake fails with "Read underflow".
    public static var hasTaggedFieldsFix: Bool { rd_kafka_version() >= 0x0202_0000 }

    /// The oldest librdkafka this pipeline runs on: 2.0 loses records when pause/resume or a rebalance runs beside
    /// the batch consumer (fixed in 2.1), 2.1 crashes when a batch consumer subscribes to a topic that does not
    /// exist yet (fixed in 2.2), and both mis-parse newer brokers' ApiVersion replies.
    public static let minimumVersion: Int32 = 0x0202_0000

    /// Nil when `version` (librdkafka's `rd_kafka_version()` encoding) is supported, else why it is refused.
    public static func refusal(version: Int32, text: String) -> String? {
        guard version < minimumVersion else { return nil }
        return "librdkafka \(text) is older than 2.2, which this pipeline requires: 2.0 loses records when pause/resume or a rebalance runs beside the batch consumer, 2.1 crashes when a consumer subscribes to a topic that does not exist yet, and both mis-parse newer brokers' ApiVersion replies. Install librdkafka >= 2.2 (Ubuntu 24.04 packages 2.3; the project's image ships it; locally, scripts/services.sh env sets LD_LIBRARY_PATH to the one scripts/install.sh installs)"
    }

    /// What to tell an operator when a broker handshake fails on an old librdkafka.
    static var upgradeAdvice: String {
        hasTaggedFieldsFix
            ? ""
            : " (librdkafka \(version) is older than 2.2 and cannot parse some brokers' ApiVersion replies: run with librdkafka >= 2.2, e.g. scripts/services.sh env sets LD_LIBRARY_PATH to the one installed by scripts/install.sh)"
    }
}

/// A librdkafka handle shared between threads. librdkafka's handles are thread-safe; this wrapper only makes
/// the pointer sendable.
struct RDKafkaHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// What librdkafka's C callbacks reach through `rd_kafka_opaque`. It must outlive the handle: owners destroy the
/// handle (which joins librdkafka's threads) before they release this object.
class RDKafkaCallbackContext: @unchecked Sendable {
    let logger: Logger
    let metricsLabel: String
    /// Set by the error callback: false after "all brokers down", true again after any successful poll result.
    let brokersReachable = Atomic<Bool>(true)

    init(logger: Logger, metricsLabel: String) {
        self.logger = logger
        self.metricsLabel = metricsLabel
    }

    static func from(_ handle: OpaquePointer?) -> RDKafkaCallbackContext? {
        guard let handle, let opaque = rd_kafka_opaque(handle) else { return nil }
        return Unmanaged<RDKafkaCallbackContext>.fromOpaque(opaque).takeUnretainedValue()
    }
}

/// Creation, blocking calls and teardown common to producers, consumers and admin clients.
final class RDKafkaClient: Sendable {
    let handle: RDKafkaHandle
    let context: RDKafkaCallbackContext
    /// Blocking librdkafka calls (poll with timeout, flush, synchronous commit, close, admin) run here, never on
    /// Swift's cooperative thread pool.
    let blockingQueue: DispatchQueue
    private let destroyed = Atomic<Bool>(false)

    init(
        type: rd_kafka_type_t, properties: [String: String], context: RDKafkaCallbackContext,
        configure: (OpaquePointer) -> Void = { _ in }
    ) throws(KafkaError) {
        if let refusal = Librdkafka.refusal(version: rd_kafka_version(), text: Librdkafka.version) { throw .client(refusal) }
        guard let configuration = rd_kafka_conf_new() else { throw .client("rd_kafka_conf_new failed") }
        var errorText = [CChar](repeating: 0, count: 512)
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) {
            if rd_kafka_conf_set(configuration, key, value, &errorText, errorText.count) != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(configuration)
                let shown = KafkaClientConfiguration.isSecret(key) ? "<redacted>" : value
                throw .client("invalid librdkafka setting \(key)=\(shown): \(String(nulTerminated: errorText))")
            }
        }
        rd_kafka_conf_set_opaque(configuration, Unmanaged.passUnretained(context).toOpaque())
        rd_kafka_conf_set_log_cb(configuration) { handle, level, facility, message in
            guard let context = RDKafkaCallbackContext.from(handle) else { return }
            let text = "\(facility.map { String(cString: $0) } ?? ""): \(message.map { String(cString: $0) } ?? "")"
            // syslog levels: 0-3 error, 4 warning, 5-6 notice/info, 7 debug.
            switch level {
            case ...3: context.logger.error("librdkafka \(text)")
            case 4: context.logger.warning("librdkafka \(text)")
            case 5...6: context.logger.info("librdkafka \(text)")
            default: context.logger.debug("librdkafka \(text)")
            }
        }
        rd_kafka_conf_set_error_cb(configuration) { handle, code, reason, _ in
            guard let context = RDKafkaCallbackContext.from(handle) else { return }
            let error = KafkaError(code: code, message: reason.map { String(cString: $0) })
            if code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN.rawValue || code == RD_KAFKA_RESP_ERR__TRANSPORT.rawValue {
                context.brokersReachable.store(false, ordering: .relaxed)
            }
            var advice = ""
            if code == RD_KAFKA_RESP_ERR__TRANSPORT.rawValue || code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN.rawValue {
                advice = Librdkafka.upgradeAdvice
            }
            context.logger.warning("kafka client error \(error)\(advice)")
        }
        if (Int(properties["statistics.interval.ms"] ?? "0") ?? 0) > 0 {
            rd_kafka_conf_set_stats_cb(configuration) { handle, json, length, _ in
                guard let context = RDKafkaCallbackContext.from(handle), let json else { return 0 }
                RDKafkaClient.recordStatistics(Data(bytes: json, count: length), label: context.metricsLabel)
                return 0  // librdkafka frees the buffer
            }
        }
        configure(configuration)
        guard let pointer = rd_kafka_new(type, configuration, &errorText, errorText.count) else {
            rd_kafka_conf_destroy(configuration)
            throw .client("rd_kafka_new failed: \(String(nulTerminated: errorText))")
        }
        self.handle = RDKafkaHandle(pointer: pointer)
        self.context = context
        self.blockingQueue = DispatchQueue(label: "kafka-client.\(context.metricsLabel)")
        // Keep the context alive for as long as the handle: released in `destroy()`.
        _ = Unmanaged.passRetained(context)
        context.logger.info("kafka client created", metadata: ["librdkafka": "\(Librdkafka.version)"])
        if !Librdkafka.hasTaggedFieldsFix {
            context.logger.warning("running on librdkafka \(Librdkafka.version)\(Librdkafka.upgradeAdvice)")
        }
    }

    /// Runs a blocking librdkafka call on this client's queue.
    func blocking<T: Sendable>(_ body: @escaping @Sendable (OpaquePointer) -> T) async -> T {
        let handle = self.handle
        return await withCheckedContinuation { continuation in
            blockingQueue.async { continuation.resume(returning: body(handle.pointer)) }
        }
    }

    /// Destroys the handle (joining librdkafka's threads, so no callback runs afterwards), then releases the
    /// callback context. Idempotent.
    ///
    /// `flags`: `RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE` for a consumer whose group membership is already gone
    /// (after a fatal error), where the implicit close would wait on a group that no longer answers.
    func destroy(flags: Int32 = 0) async {
        guard !destroyed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let context = self.context
        await blocking { handle in
            if flags == 0 { rd_kafka_destroy(handle) } else { rd_kafka_destroy_flags(handle, flags) }
            Unmanaged.passUnretained(context).release()
        }
    }

    /// librdkafka statistics (JSON) as swift-metrics gauges: queue depth, bytes and messages in flight.
    static func recordStatistics(_ json: Data, label: String) {
        guard let object = try? JSONSerialization.jsonObject(with: json) as? [String: Any] else { return }
        for key in ["msg_cnt", "msg_size", "replyq", "tx", "rx", "txmsgs", "rxmsgs"] {
            if let value = object[key] as? NSNumber {
                Gauge(label: "kafka_client_\(key)", dimensions: [("client", label)]).record(value.doubleValue)
            }
        }
    }

    /// Fetches cluster metadata (topics and their partition counts); also a cheap reachability probe.
    func metadata(timeoutMilliseconds: Int32) async throws(KafkaError) -> [String: Int] {
        let result: Result<[String: Int], KafkaError> = await blocking { handle in
            var metadata: UnsafePointer<rd_kafka_metadata>?
            let error = rd_kafka_metadata(handle, 1, nil, &metadata, timeoutMilliseconds)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else {
                return .failure(KafkaError(error, message: "metadata request failed: \(String(cString: rd_kafka_err2str(error)))\(Librdkafka.upgradeAdvice)"))
            }
            defer { rd_kafka_metadata_destroy(metadata) }
            var topics: [String: Int] = [:]
            for index in 0..<Int(metadata.pointee.topic_cnt) {
                let topic = metadata.pointee.topics[index]
                guard topic.err == RD_KAFKA_RESP_ERR_NO_ERROR else { continue }
                topics[String(cString: topic.topic)] = Int(topic.partition_cnt)
            }
            return .success(topics)
        }
        let topics = try result.get()
        context.brokersReachable.store(true, ordering: .relaxed)
        return topics
    }
}

// MARK: - Topic partition lists

extension Array where Element == KafkaTopicPartition {
    /// A new `rd_kafka_topic_partition_list_t` (caller destroys), each entry with `offset` (default: invalid).
    func makeList(offsets: [KafkaTopicPartition: Int64] = [:]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        let list = rd_kafka_topic_partition_list_new(Int32(count))!
        for element in self {
            let entry = rd_kafka_topic_partition_list_add(list, element.topic, element.partition)!
            entry.pointee.offset = offsets[element] ?? Int64(RD_KAFKA_OFFSET_INVALID)
        }
        return list
    }
}

extension UnsafeMutablePointer where Pointee == rd_kafka_topic_partition_list_t {
    /// The entries of the list as (partition, offset, error).
    var entries: [(partition: KafkaTopicPartition, offset: Int64, error: rd_kafka_resp_err_t)] {
        (0..<Int(pointee.cnt)).map { index in
            let element = pointee.elems[index]
            return (KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition), element.offset, element.err)
        }
    }
}

extension String {
    /// The text of a NUL-terminated C buffer.
    init(nulTerminated buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
