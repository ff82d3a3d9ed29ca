import CRDKafka

/// An error from librdkafka or the broker, with what to do about it.
///
/// `isRetriable` errors go away by themselves (broker unreachable, leader moved, timeout): back off and retry,
/// never dead-letter. `isFatal` errors mean this client instance can no longer work (e.g. an idempotent
/// producer lost its guarantees): tear it down and create a new one.
public struct KafkaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// librdkafka's `rd_kafka_resp_err_t` value (negative: client-side, positive: broker error codes).
    public var code: Int32
    /// librdkafka's symbolic name, e.g. `_MSG_TIMED_OUT`, `NOT_COORDINATOR`.
    public var name: String
    /// Human-readable detail.
    public var message: String
    public var isRetriable: Bool
    public var isFatal: Bool

    public init(code: Int32, message: String? = nil, isRetriable: Bool? = nil, isFatal: Bool = false) {
        let error = rd_kafka_resp_err_t(rawValue: code)
        self.code = code
        self.name = String(cString: rd_kafka_err2name(error))
        self.message = message ?? String(cString: rd_kafka_err2str(error))
        self.isRetriable = isRetriable ?? KafkaError.retriableCodes.contains(code)
        self.isFatal = isFatal || code == RD_KAFKA_RESP_ERR__FATAL.rawValue
    }

    init(_ error: rd_kafka_resp_err_t, message: String? = nil) {
        self.init(code: error.rawValue, message: message)
    }

    /// Takes ownership of an `rd_kafka_error_t` and destroys it.
    init(consuming error: OpaquePointer) {
        defer { rd_kafka_error_destroy(error) }
        self.init(
            code: rd_kafka_error_code(error).rawValue, message: String(cString: rd_kafka_error_string(error)),
            isRetriable: rd_kafka_error_is_retriable(error) != 0 || KafkaError.retriableCodes.contains(rd_kafka_error_code(error).rawValue),
            isFatal: rd_kafka_error_is_fatal(error) != 0)
    }

    /// An error of our own wrapper (configuration, state), not librdkafka's.
    static func client(_ message: String, retriable: Bool = false) -> KafkaError {
        KafkaError(code: RD_KAFKA_RESP_ERR__INVALID_ARG.rawValue, message: message, isRetriable: retriable)
    }

    /// Codes that describe a passing condition of the cluster or the network.
    static let retriableCodes: Set<Int32> = [
        RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
        RD_KAFKA_RESP_ERR__TIMED_OUT, RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR__RESOLVE,
        RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE, RD_KAFKA_RESP_ERR__WAIT_COORD, RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC,
        RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION, RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS, RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR,
    ].reduce(into: Set<Int32>()) { $0.insert($1.rawValue) }

    public var description: String { "\(name) (\(code)): \(message)" }
}
