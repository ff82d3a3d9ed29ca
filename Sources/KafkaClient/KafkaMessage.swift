/// A record header. Values are bytes; most of ours are UTF-8 text.
public struct KafkaHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    public init(key: String, string: String) {
        self.init(key: key, value: Array(string.utf8))
    }

    /// The value as UTF-8 text, if it is.
    public var stringValue: String? { value.flatMap { String(validating: $0, as: UTF8.self) } }
}

extension Array where Element == KafkaHeader {
    /// The first header named `key`, as text.
    public func string(_ key: String) -> String? { first(where: { $0.key == key })?.stringValue }
}

/// A record to produce.
public struct KafkaProducerMessage: Sendable, Hashable {
    public var topic: String
    /// Nil lets the partitioner choose (murmur2 of the key, as the Java client does).
    public var partition: Int32?
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]
    /// Milliseconds since 1970; nil for "now".
    public var timestamp: Int64?

    public init(topic: String, partition: Int32? = nil, key: [UInt8]? = nil, value: [UInt8], headers: [KafkaHeader] = [], timestamp: Int64? = nil) {
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
    }
}

/// Where the broker acknowledged a record.
public struct KafkaDeliveryReport: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
}

/// A consumed record.
public struct KafkaConsumerMessage: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaHeader]
    /// Milliseconds since 1970 (create or log-append time), if the broker gave one.
    public var timestamp: Int64?

    public var topicPartition: KafkaTopicPartition { KafkaTopicPartition(topic: topic, partition: partition) }
}

/// A partition of a topic.
public struct KafkaTopicPartition: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { (lhs.topic, lhs.partition) < (rhs.topic, rhs.partition) }
    public var description: String { "\(topic)[\(partition)]" }
}

/// A group's change of partitions, as seen by one consumer.
public enum KafkaRebalanceEvent: Sendable, Hashable {
    case assigned([KafkaTopicPartition])
    /// Stored offsets of these partitions were committed before they were released.
    case revoked([KafkaTopicPartition])
}
