import Foundation
import KafkaClient
import PipelineConfiguration

/// Everything the ingest service is configured with. Read from the environment by `fromEnvironment`.
public struct IngestConfiguration: Sendable {
    /// `INGEST_HOST`: address to listen on.
    public var host = "0.0.0.0"
    /// `INGEST_PORT`: port to listen on (0: any free port, for tests).
    public var port = 8080
    /// `INGEST_PATH`: the URL to give App Store Connect. Notifications of both environments are accepted here.
    public var notificationPath = "/v2/notifications"
    /// `INGEST_ENVIRONMENT_PATHS`: extra paths whose environment travels as the record header `environment-hint`,
    /// as `path=Environment` pairs separated by commas. The hint is informational: the worker trusts only the
    /// verified payload.
    public var environmentPaths: [String: String] = ["/v2/notifications/production": "Production", "/v2/notifications/sandbox": "Sandbox"]
    /// `INGEST_MAX_BODY_BYTES`: larger bodies are refused with 400 (Apple's notifications are about 19 KB).
    public var maximumBodyBytes = 256 * 1024
    /// `NOTIFICATIONS_TOPIC`: where accepted notifications are produced.
    public var topic = "appstore.notifications.v2"
    /// `INGEST_PRODUCE_TIMEOUT_MS`: the longest a request waits for the broker's acknowledgement before 503.
    public var produceTimeoutMilliseconds = 10_000
    /// `INGEST_RETRY_AFTER_SECONDS`: the `Retry-After` of a 503.
    public var retryAfterSeconds = 60
    /// `INGEST_IDLE_TIMEOUT_MS`: a connection that sends nothing between requests for this long is closed.
    public var idleTimeoutMilliseconds = 60_000
    /// `INGEST_REQUEST_TIMEOUT_MS`: from a request's first byte, its head and body must arrive within this, or
    /// 408 and the connection closed. Apple's ~19 KB POST takes milliseconds; a slowloris client is cut off here.
    public var requestTimeoutMilliseconds = 15_000
    /// `INGEST_MAX_CONNECTIONS`: open connections at most; further ones wait in the listen backlog.
    public var maximumConnections = 1_024
    /// `INGEST_READINESS_CACHE_MS`: how long a broker reachability probe answers `/health/ready` (a probe or a
    /// flood of them then costs the brokers one metadata request per this period, not one per request).
    public var readinessCacheMilliseconds = 2_000
    /// `INGEST_SHUTDOWN_DRAIN_MS`: on SIGTERM, how long readiness fails while the server still serves (keep it,
    /// plus the produce timeout, below the orchestrator's grace period).
    public var shutdownDrainMilliseconds = 5_000
    /// `INGEST_INSTANCE_ID`: this instance's name in the `ingest-instance` header (default: host name).
    public var instanceId = ProcessInfo.processInfo.hostName
    /// Kafka connection settings (`KAFKA_*`).
    public var kafka: KafkaClientConfigurationValues

    public init(kafka: KafkaClientConfigurationValues) {
        self.kafka = kafka
    }

    /// The environment variables ingest reads (for documentation and the deployment consistency check).
    public static let environmentKeys = [
        "INGEST_HOST", "INGEST_PORT", "INGEST_PATH", "INGEST_ENVIRONMENT_PATHS", "INGEST_MAX_BODY_BYTES", "NOTIFICATIONS_TOPIC",
        "INGEST_PRODUCE_TIMEOUT_MS", "INGEST_RETRY_AFTER_SECONDS", "INGEST_INSTANCE_ID", "INGEST_IDLE_TIMEOUT_MS",
        "INGEST_REQUEST_TIMEOUT_MS", "INGEST_MAX_CONNECTIONS", "INGEST_READINESS_CACHE_MS", "INGEST_SHUTDOWN_DRAIN_MS", "LOG_LEVEL",
    ] + KafkaEnvironment.keys

    public static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> IngestConfiguration {
        var configuration = IngestConfiguration(kafka: try KafkaEnvironment.client(environment, defaultClientId: "appstore-ingest"))
        configuration.host = environment.string("INGEST_HOST", default: configuration.host)
        configuration.port = try environment.int("INGEST_PORT", default: configuration.port, range: 0...65535)
        configuration.notificationPath = environment.string("INGEST_PATH", default: configuration.notificationPath)
        if let pairs = environment.optionalString("INGEST_ENVIRONMENT_PATHS") {
            var paths: [String: String] = [:]
            for pair in pairs.split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2, parts[0].hasPrefix("/"), !parts[1].isEmpty else {
                    throw ConfigurationError(variable: "INGEST_ENVIRONMENT_PATHS", reason: "\"\(pair)\" is not /path=Environment")
                }
                paths[parts[0]] = parts[1]
            }
            configuration.environmentPaths = paths
        }
        configuration.maximumBodyBytes = try environment.int("INGEST_MAX_BODY_BYTES", default: configuration.maximumBodyBytes, range: 1_024...16 * 1_024 * 1_024)
        configuration.topic = environment.string("NOTIFICATIONS_TOPIC", default: configuration.topic)
        configuration.produceTimeoutMilliseconds = try environment.int("INGEST_PRODUCE_TIMEOUT_MS", default: configuration.produceTimeoutMilliseconds, range: 100...300_000)
        configuration.retryAfterSeconds = try environment.int("INGEST_RETRY_AFTER_SECONDS", default: configuration.retryAfterSeconds, range: 0...86_400)
        configuration.instanceId = environment.string("INGEST_INSTANCE_ID", default: configuration.instanceId)
        configuration.idleTimeoutMilliseconds = try environment.int("INGEST_IDLE_TIMEOUT_MS", default: configuration.idleTimeoutMilliseconds, range: 100...3_600_000)
        configuration.requestTimeoutMilliseconds = try environment.int("INGEST_REQUEST_TIMEOUT_MS", default: configuration.requestTimeoutMilliseconds, range: 100...600_000)
        configuration.maximumConnections = try environment.int("INGEST_MAX_CONNECTIONS", default: configuration.maximumConnections, range: 1...1_000_000)
        configuration.shutdownDrainMilliseconds = try environment.int("INGEST_SHUTDOWN_DRAIN_MS", default: configuration.shutdownDrainMilliseconds, range: 0...120_000)
        configuration.readinessCacheMilliseconds = try environment.int("INGEST_READINESS_CACHE_MS", default: configuration.readinessCacheMilliseconds, range: 0...60_000)
        return configuration
    }

    /// `ingest --help`.
    public static let help = """
        ingest: Apple's App Store Server Notifications V2 in, the notifications topic out (200 only after the broker's
        acknowledgement). Configured by the environment:
          KAFKA_BOOTSTRAP_SERVERS, KAFKA_CLIENT_ID, KAFKA_CONFIG_*   the broker (required), as for every process
          INGEST_HOST, INGEST_PORT          where it listens (0.0.0.0, 8080)
          INGEST_PATH                       the notification path (/v2/notifications)
          INGEST_ENVIRONMENT_PATHS          /path=Environment pairs that also accept POSTs (…/production, …/sandbox)
          INGEST_MAX_BODY_BYTES             larger bodies are refused (262144)
          NOTIFICATIONS_TOPIC               the topic (appstore.notifications.v2)
          INGEST_PRODUCE_TIMEOUT_MS         the broker's acknowledgement must come within this, else 503 (10000)
          INGEST_RETRY_AFTER_SECONDS        Retry-After of a 503 (60)
          INGEST_INSTANCE_ID                this instance's name in the ingest-instance header (the host name)
          INGEST_IDLE_TIMEOUT_MS, INGEST_REQUEST_TIMEOUT_MS   connection deadlines (60000, 15000)
          INGEST_MAX_CONNECTIONS            open connections at most (1024)
          INGEST_READINESS_CACHE_MS         how long /health/ready reuses its broker probe (2000)
          INGEST_SHUTDOWN_DRAIN_MS          after SIGTERM, readiness fails this long while requests are still served (5000)
          LOG_LEVEL                         trace, debug, info (default), notice, warning, error, critical
        docs/ingest.md.
        """

    /// The producer settings: durable by default (acks=all, idempotent), delivery bounded by the produce timeout.
    public var producerConfiguration: KafkaProducerConfiguration {
        var producer = KafkaProducerConfiguration(client: kafka.clientConfiguration)
        producer.deliveryTimeoutMilliseconds = produceTimeoutMilliseconds
        producer.lingerMilliseconds = 2
        return producer
    }
}
