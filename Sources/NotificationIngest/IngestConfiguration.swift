import Foundation
import KafkaClient
import NotificationRecords
import PipelineConfiguration

/// Everything the ingest service is configured with. Read from the environment by `fromEnvironment`.
package struct IngestConfiguration: Sendable {
    /// `INGEST_HOST`: address to listen on.
    package var host = "0.0.0.0"
    /// `INGEST_PORT`: port to listen on (0: any free port, for tests).
    package var port = 8080
    /// `INGEST_PATH`: the URL to give App Store Connect. Notifications of both environments are accepted here.
    package var notificationPath = "/v2/notifications"
    /// `INGEST_ENVIRONMENT_PATHS`: extra paths whose environment travels as the record header `environment-hint`,
    /// as `path=Environment` pairs separated by commas. The hint is informational: the worker trusts only the
    /// verified payload.
    package var environmentPaths: [String: String] = ["/v2/notifications/production": "Production", "/v2/notifications/sandbox": "Sandbox"]
    /// `INGEST_MAX_BODY_BYTES`: larger bodies are refused with 400 (Apple's notifications are about 19 KB).
    package var maximumBodyBytes = 256 * 1024
    /// `NOTIFICATIONS_TOPIC`: where accepted notifications are produced.
    package var topic = NotificationsTopic.defaultName
    /// `INGEST_PRODUCE_TIMEOUT`: the longest a request waits for the broker's acknowledgement before 503.
    package var produceTimeout: Duration = .seconds(10)
    /// `INGEST_RETRY_AFTER_SECONDS`: the `Retry-After` of a 503.
    package var retryAfterSeconds = 60
    /// `INGEST_IDLE_TIMEOUT`: a connection that sends nothing between requests for this long is closed.
    package var idleTimeout: Duration = .seconds(60)
    /// `INGEST_REQUEST_TIMEOUT`: from a request's first byte, its head and body must arrive within this, or
    /// 408 and the connection closed. Apple's ~19 KB POST takes milliseconds; a slowloris client is cut off here.
    package var requestTimeout: Duration = .seconds(15)
    /// `INGEST_MAX_CONNECTIONS`: open connections at most; further ones wait in the listen backlog.
    package var maximumConnections = 1_024
    /// `INGEST_READINESS_CACHE`: how long a broker reachability probe answers `/health/ready` (a probe or a
    /// flood of them then costs the brokers one metadata request per this period, not one per request).
    package var readinessCache: Duration = .seconds(2)
    /// `INGEST_SHUTDOWN_DRAIN`: on SIGTERM, how long readiness fails while the server still serves (keep it,
    /// plus the produce timeout, below the orchestrator's grace period).
    package var shutdownDrain: Duration = .seconds(5)
    /// `INGEST_INSTANCE_ID`: this instance's name in the `ingest-instance` header (default: host name).
    package var instanceId = ProcessInfo.processInfo.hostName
    /// Kafka connection settings (`KAFKA_*`).
    package var kafka: KafkaClientConfigurationValues

    package init(kafka: KafkaClientConfigurationValues) {
        self.kafka = kafka
    }

    /// The settings ingest reads, for `--help`, the docs and the deployment consistency check.
    package static var catalog: SettingsCatalog { Settings.catalog }

    /// The environment variables ingest reads (the deprecated ones included).
    package static let environmentKeys = Settings.catalog.environmentKeys + KafkaEnvironment.keys

    package static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> IngestConfiguration {
        var configuration = IngestConfiguration(kafka: try KafkaEnvironment.client(environment, defaultClientId: "appstore-ingest"))
        configuration.host = try Settings.host.read(environment)
        configuration.port = try Settings.port.read(environment)
        configuration.notificationPath = try Settings.path.read(environment)
        if let pairs = environment.optionalString(Settings.environmentPaths.variable) {
            var paths: [String: String] = [:]
            for pair in pairs.split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2, parts[0].hasPrefix("/"), !parts[1].isEmpty else {
                    throw ConfigurationError(variable: Settings.environmentPaths.variable, reason: "\"\(pair)\" is not /path=Environment")
                }
                paths[parts[0]] = parts[1]
            }
            configuration.environmentPaths = paths
        }
        configuration.maximumBodyBytes = try Settings.maximumBodyBytes.read(environment)
        configuration.topic = try Settings.topic.read(environment)
        configuration.produceTimeout = try Settings.produceTimeout.read(environment)
        configuration.retryAfterSeconds = try Settings.retryAfterSeconds.read(environment)
        configuration.instanceId = environment.string(Settings.instanceId.variable, default: configuration.instanceId)
        configuration.idleTimeout = try Settings.idleTimeout.read(environment)
        configuration.requestTimeout = try Settings.requestTimeout.read(environment)
        configuration.maximumConnections = try Settings.maximumConnections.read(environment)
        configuration.shutdownDrain = try Settings.shutdownDrain.read(environment)
        configuration.readinessCache = try Settings.readinessCache.read(environment)
        return configuration
    }

    /// `ingest --help`.
    package static var help: String {
        """
        ingest: Apple's App Store Server Notifications V2 in, the notifications topic out (200 only after the broker's
        acknowledgement). Configured by the environment (durations as 500ms, 10s, 2m):
        \(KafkaEnvironment.catalog.helpLines)
        \(Settings.catalog.helpLines)
        docs/ingest.md.
        """
    }

    /// The producer settings: durable by default (acks=all, idempotent), delivery bounded by the produce timeout.
    package var producerConfiguration: KafkaProducerConfiguration {
        var producer = KafkaProducerConfiguration(client: kafka.clientConfiguration)
        producer.deliveryTimeoutMilliseconds = Int(produceTimeout.wholeMilliseconds)
        producer.lingerMilliseconds = 2
        return producer
    }
}
