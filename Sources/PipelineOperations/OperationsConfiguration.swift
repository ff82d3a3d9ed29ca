import AppStoreNotifications
import AppStoreServerAPI
import EntitlementEvents
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import NotificationRecords
import PipelineConfiguration
import PostgresNIO
import SharedSettings

/// What `pipelinectl` reads from the environment: the same variables the services read, so an operator runs it
/// with the deployment's own ConfigMap/Secret (command-line options override).
package struct OperationsConfiguration: Sendable {
    /// `NOTIFICATIONS_TOPIC`
    package var topic = NotificationsTopic.defaultName
    /// `DEAD_LETTER_TOPIC` (default: the topic + `.dead-letter`)
    package var deadLetterTopic = NotificationsTopic.defaultDeadLetterName(of: NotificationsTopic.defaultName)
    /// `WORKER_GROUP_ID`: the group `replay` and `lag` default to.
    package var groupId = "appstore-worker"
    /// `TOPIC_PARTITIONS`: partitions of the notifications topic; the most workers that can share the load. 96 by
    /// default, chosen for the peak (docs/scale.md): a partition count cannot shrink, and growing it moves keys to
    /// other partitions (a subscription's order breaks across the change), so it is set once for the most workers
    /// a deployment will ever run; 96 divides evenly among 1-4, 6, 8, 12, 16, 24, 32 and 48 workers.
    package var partitions: Int32 = 96
    /// `TOPIC_REPLICATION_FACTOR`: 3 on a production cluster; 1 for a single local broker.
    package var replicationFactor: Int32 = 3
    /// `TOPIC_RETENTION_DAYS`: how long notifications stay replayable. At least 14 days: longer than Apple's
    /// ~6.5-day retry window, so an outage of the database or the workers can always be replayed.
    package var retentionDays = 14
    /// `DEAD_LETTER_RETENTION_DAYS`: dead letters wait this long for a fix and a re-drive. 28 days by default: an
    /// erased customer's dead letters (which erasure cannot reach in Kafka) are gone within the month GDPR allows.
    package var deadLetterRetentionDays = 28
    /// `DEAD_LETTER_RETENTION_BYTES`: and at most this many bytes per dead-letter partition (oldest deleted first):
    /// garbage that passes ingest's shape check cannot fill the brokers' disks, whatever the time limit says.
    package var deadLetterRetentionBytes: Int64 = 1 << 30
    /// `KAFKA_*`, when set.
    package var kafka: KafkaClientConfigurationValues?
    /// `POSTGRES_URL`, when set.
    package var postgresURL: String?
    /// `EVENTS_*`: the entitlement events topic (`topics ensure`, `events tail`).
    package var events = EventsConfiguration()
    /// `ERASURE_KEY_FILE` / `ERASURE_KEY`: what pull commands and re-drives check records against before they
    /// produce them (an erased customer's records never reach the topic again), and what erasures are made with.
    package var erasureKey: ErasureKey?
    /// `POSTGRES_READ_URL` and companions: where `pipelinectl metrics` reads (docs/scale.md).
    package var reads = ReadReplicaSettings()

    package init() {}

    package static let environmentKeys = [
        "NOTIFICATIONS_TOPIC", "DEAD_LETTER_TOPIC", "WORKER_GROUP_ID", "TOPIC_PARTITIONS", "TOPIC_REPLICATION_FACTOR", "TOPIC_RETENTION_DAYS",
        "DEAD_LETTER_RETENTION_DAYS", "DEAD_LETTER_RETENTION_BYTES", "POSTGRES_URL", "LOG_LEVEL",
        // pipelinectl webhooks (WebhooksConfiguration.toolSettings).
        "WEBHOOKS_ALLOW_PRIVATE_TARGETS", "WEBHOOK_SECRET_ROTATION_OVERLAP", "WEBHOOK_TIMEOUT", "WEBHOOK_TIMEOUT_MS",
        // pipelinectl customers (the erasure key) and retention (RetentionPolicy's variables).
        "ERASURE_KEY_FILE", "ERASURE_KEY", "ARCHIVE_RETENTION_DAYS", "DEAD_LETTER_RECORD_RETENTION_DAYS", "PURCHASE_CLAIM_RETENTION_DAYS",
        "CONSUMPTION_REQUEST_RETENTION_DAYS", "CONSOLE_AUDIT_RETENTION_DAYS", "ERASED_EVENT_IDS_RETENTION_DAYS", "WEBHOOK_DELIVERY_RETENTION",
        "OFFER_SIGNATURE_RETENTION_DAYS",
    ] + KafkaEnvironment.keys + AppStoreServerAPIConfiguration.environmentKeys + EventsConfiguration.environmentKeys + ReadReplicaSettings.environmentKeys

    package static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> OperationsConfiguration {
        var configuration = OperationsConfiguration()
        (configuration.topic, configuration.deadLetterTopic) = try NotificationsTopic.names(environment)
        configuration.groupId = environment.string("WORKER_GROUP_ID", default: configuration.groupId)
        configuration.partitions = Int32(try environment.int("TOPIC_PARTITIONS", default: Int(configuration.partitions), range: 1...10_000))
        configuration.replicationFactor = Int32(try environment.int("TOPIC_REPLICATION_FACTOR", default: Int(configuration.replicationFactor), range: 1...16))
        configuration.retentionDays = try environment.int("TOPIC_RETENTION_DAYS", default: configuration.retentionDays, range: 7...3_650)
        configuration.deadLetterRetentionDays = try environment.int("DEAD_LETTER_RETENTION_DAYS", default: configuration.deadLetterRetentionDays, range: 7...3_650)
        configuration.deadLetterRetentionBytes = Int64(try environment.int(
            "DEAD_LETTER_RETENTION_BYTES", default: Int(configuration.deadLetterRetentionBytes), range: 16 * 1_024 * 1_024...1_024 * 1_024 * 1_024 * 1_024))
        if environment.optionalString("KAFKA_BOOTSTRAP_SERVERS") != nil {
            configuration.kafka = try KafkaEnvironment.client(environment, defaultClientId: "pipelinectl")
        }
        configuration.postgresURL = environment.optionalString("POSTGRES_URL")
        configuration.events = try EventsConfiguration.fromEnvironment(environment)
        configuration.erasureKey = try PipelineSettings.erasureKey(environment)
        configuration.reads = try ReadReplicaSettings.fromEnvironment(environment)
        return configuration
    }

    /// The Kafka settings, or an error naming the variable.
    package func requireKafka() throws(ConfigurationError) -> KafkaClientConfiguration {
        guard let kafka else { throw ConfigurationError(variable: "KAFKA_BOOTSTRAP_SERVERS", reason: "is required (or --bootstrap-servers)") }
        return kafka.clientConfiguration
    }

    /// The topics `topics ensure` creates: notifications, the dead-letter topic (fewer partitions, longer
    /// retention), and the entitlement events topic (`EVENTS_TOPIC_PARTITIONS`; as replayable as notifications).
    package var topicSpecifications: [KafkaAdminClient.TopicSpecification] {
        let day: Int64 = 86_400_000
        return [
            .init(name: topic, partitions: partitions, replicationFactor: replicationFactor, config: [
                "retention.ms": String(Int64(retentionDays) * day), "cleanup.policy": "delete",
                "min.insync.replicas": String(min(2, replicationFactor)), "unclean.leader.election.enable": "false",
            ]),
            .init(name: deadLetterTopic, partitions: min(partitions, 3), replicationFactor: replicationFactor, config: [
                "retention.ms": String(Int64(deadLetterRetentionDays) * day), "retention.bytes": String(deadLetterRetentionBytes), "cleanup.policy": "delete",
                "min.insync.replicas": String(min(2, replicationFactor)), "unclean.leader.election.enable": "false",
            ]),
            .init(name: events.topic, partitions: events.partitions, replicationFactor: replicationFactor, config: [
                "retention.ms": String(Int64(retentionDays) * day), "cleanup.policy": "delete",
                "min.insync.replicas": String(min(2, replicationFactor)), "unclean.leader.election.enable": "false",
            ]),
        ]
    }

    /// Runs `body` with an `EntitlementStore` on a running pool of one connection.
    package func withStore<T: Sendable>(logger: Logger, _ body: @Sendable (EntitlementStore) async throws -> T) async throws -> T {
        guard let postgresURL else { throw ConfigurationError(variable: "POSTGRES_URL", reason: "is required (or --postgres-url)") }
        var configuration = try PostgresClient.Configuration(url: postgresURL)
        configuration.options.maximumConnections = 2
        // The pool's own background log at error: tools print what they do; pool chatter is noise there.
        var poolLogger = logger
        poolLogger.logLevel = .error
        let client = PostgresClient(configuration: configuration, backgroundLogger: poolLogger)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(EntitlementStore(client: client, logger: logger, erasureKey: erasureKey))
        }
    }
}
