/// Settings shared by producers, consumers and admin clients.
///
/// Typed fields cover what the pipeline relies on; `additionalConfig` is passed to librdkafka unchanged, so every
/// librdkafka property is reachable. Security, for example:
///
/// ```swift
/// configuration.additionalConfig["security.protocol"] = "SASL_SSL"
/// configuration.additionalConfig["sasl.mechanisms"] = "SCRAM-SHA-512"
/// configuration.additionalConfig["sasl.username"] = "ingest"
/// configuration.additionalConfig["sasl.password"] = secret          // never logged
/// configuration.additionalConfig["ssl.ca.location"] = "/etc/kafka/ca.pem"
/// ```
public struct KafkaClientConfiguration: Sendable, Hashable {
    /// `bootstrap.servers`, e.g. `["kafka-0:9092", "kafka-1:9092"]`.
    public var bootstrapServers: [String]
    /// `client.id`, shown in broker logs and group descriptions.
    public var clientId: String
    /// Emit librdkafka statistics to swift-metrics every this many milliseconds (0: off).
    public var statisticsIntervalMilliseconds: Int
    /// Passed to librdkafka as is; wins over typed fields.
    public var additionalConfig: [String: String]

    public init(bootstrapServers: [String], clientId: String = "appstore-pipeline", statisticsIntervalMilliseconds: Int = 0, additionalConfig: [String: String] = [:]) {
        self.bootstrapServers = bootstrapServers
        self.clientId = clientId
        self.statisticsIntervalMilliseconds = statisticsIntervalMilliseconds
        self.additionalConfig = additionalConfig
    }

    var properties: [String: String] {
        [
            "bootstrap.servers": bootstrapServers.joined(separator: ","),
            "client.id": clientId,
            "statistics.interval.ms": String(statisticsIntervalMilliseconds),
        ]
    }

    /// Keys whose values must never reach a log line.
    static func isSecret(_ key: String) -> Bool {
        key.contains("password") || key.contains("secret") || key.hasSuffix(".key") || key.contains("sasl.oauthbearer.config")
    }
}

/// A producer's settings. Defaults favour durability: `acks=all` and the idempotent producer, so a record is
/// acknowledged only once every in-sync replica has it, exactly once per send.
public struct KafkaProducerConfiguration: Sendable, Hashable {
    public var client: KafkaClientConfiguration
    /// `acks`: `all` (default), `1` or `0`.
    public var acks: String = "all"
    /// `enable.idempotence`.
    public var enableIdempotence: Bool = true
    /// `delivery.timeout.ms`: the longest a record may wait for its acknowledgement (retries included) before
    /// its delivery fails. This is what bounds an HTTP caller's wait when the broker is away.
    public var deliveryTimeoutMilliseconds: Int = 10_000
    /// `linger.ms`: how long to wait to fill a batch.
    public var lingerMilliseconds: Int = 5
    /// `compression.type`: none, gzip, snappy, lz4, zstd.
    public var compression: String = "lz4"
    /// `queue.buffering.max.messages`: records waiting in the client before `send` fails with queue full.
    public var maximumQueuedMessages: Int = 100_000
    /// How long a graceful shutdown waits for in-flight records to be acknowledged.
    public var flushTimeoutMilliseconds: Int = 10_000
    /// `queue.buffering.max.kbytes`: bytes of records waiting in the client at most (librdkafka's default is
    /// 1 GiB); past it, `send` fails with queue full (ingest answers 503) instead of growing towards the pod limit.
    public var maximumQueuedKilobytes: Int = 32 * 1024

    public init(client: KafkaClientConfiguration) {
        self.client = client
    }

    var properties: [String: String] {
        var properties = client.properties
        properties["acks"] = acks
        properties["enable.idempotence"] = String(enableIdempotence)
        properties["delivery.timeout.ms"] = String(deliveryTimeoutMilliseconds)
        // A request must be allowed to time out before the whole delivery does.
        properties["request.timeout.ms"] = String(min(30_000, max(1_000, deliveryTimeoutMilliseconds / 2)))
        properties["linger.ms"] = String(lingerMilliseconds)
        properties["compression.type"] = compression
        properties["queue.buffering.max.messages"] = String(maximumQueuedMessages)
        properties["queue.buffering.max.kbytes"] = String(maximumQueuedKilobytes)
        return properties.merging(client.additionalConfig) { _, additional in additional }
    }
}

/// A consumer's settings. Offsets are never stored automatically: the application stores a record's offset
/// with `storeOffset(_:)` once its effect is durable, and only stored offsets are ever committed (periodically,
/// on `commit()`, and before partitions are revoked).
public struct KafkaConsumerConfiguration: Sendable, Hashable {
    public var client: KafkaClientConfiguration
    /// `group.id`.
    public var groupId: String
    /// `auto.offset.reset` for a group with no committed offset: `earliest` (default: never skip a record) or `latest`.
    public var autoOffsetReset: String = "earliest"
    /// `session.timeout.ms`: how long a silent member stays in the group.
    public var sessionTimeoutMilliseconds: Int = 45_000
    /// `heartbeat.interval.ms`.
    public var heartbeatIntervalMilliseconds: Int = 3_000
    /// `max.poll.interval.ms`: the longest gap between polls before the member is considered stuck.
    public var maximumPollIntervalMilliseconds: Int = 300_000
    /// `auto.commit.interval.ms`: how often stored offsets are committed in the background.
    public var autoCommitIntervalMilliseconds: Int = 1_000
    /// `partition.assignment.strategy`: `cooperative-sticky` (default) moves only the partitions that must move.
    public var partitionAssignmentStrategy: String = "cooperative-sticky"
    /// `queued.max.messages.kbytes`: bytes librdkafka pre-fetches per consumer at most (its default, 64 MiB, is
    /// most of a small pod's memory during a backlog or a replay).
    public var maximumPrefetchKilobytes: Int = 16 * 1024
    /// `group.instance.id` for static membership (a restart within the session timeout keeps its partitions).
    public var groupInstanceId: String?
    /// `fetch.wait.max.ms`: how long the broker may hold a fetch that found nothing new (nil: librdkafka's 500).
    /// Apache Kafka answers as soon as a record arrives, so this only paces idle fetches there; some Kafka-protocol
    /// brokers (tansu) hold the fetch the whole time, and 500 ms then becomes the latency of a quiet stream. The
    /// worker sets it (`WorkerConfiguration.consumerConfiguration`); other consumers keep librdkafka's default.
    public var fetchWaitMaxMilliseconds: Int?
    /// `fetch.queue.backoff.ms`: how long librdkafka waits before fetching again once the pre-fetch queue reached
    /// `maximumPrefetchKilobytes`. Its default, 1 000 ms, outlasts the queue: a worker drains 12 MB in about half a
    /// second and then waited for the rest of the second, then for a fetch (`worker-bench`, 20 000 notifications:
    /// polls found the queue empty for a third of the run, one worker at 1 600-1 700 notifications/s; at 10 ms,
    /// 2 700-3 300/s with the same memory). A full queue is then checked at most 100 times a second.
    public var fetchQueueBackoffMilliseconds: Int = 10

    public init(client: KafkaClientConfiguration, groupId: String) {
        self.client = client
        self.groupId = groupId
    }

    var properties: [String: String] {
        var properties = client.properties
        properties["group.id"] = groupId
        properties["auto.offset.reset"] = autoOffsetReset
        properties["session.timeout.ms"] = String(sessionTimeoutMilliseconds)
        properties["heartbeat.interval.ms"] = String(heartbeatIntervalMilliseconds)
        properties["max.poll.interval.ms"] = String(maximumPollIntervalMilliseconds)
        properties["enable.auto.offset.store"] = "false"
        properties["enable.auto.commit"] = "true"
        properties["auto.commit.interval.ms"] = String(autoCommitIntervalMilliseconds)
        properties["partition.assignment.strategy"] = partitionAssignmentStrategy
        properties["enable.partition.eof"] = "false"
        properties["queued.max.messages.kbytes"] = String(maximumPrefetchKilobytes)
        properties["fetch.queue.backoff.ms"] = String(fetchQueueBackoffMilliseconds)
        if let fetchWaitMaxMilliseconds { properties["fetch.wait.max.ms"] = String(fetchWaitMaxMilliseconds) }
        if let groupInstanceId { properties["group.instance.id"] = groupInstanceId }
        return properties.merging(client.additionalConfig) { _, additional in additional }
    }
}
