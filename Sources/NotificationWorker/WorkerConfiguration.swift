import EntitlementEvents
import EntitlementStore
import Foundation
import KafkaClient
import PipelineConfiguration
import PostgresNIO
import SharedSettings

/// What the worker reads: the shared `PipelineSettings` (topics, apps, roots, PostgreSQL, Kafka, Apple's key) and
/// its own settings. The shared ones read through it as if they were its own (`configuration.apps`).
@dynamicMemberLookup
package struct WorkerConfiguration: Sendable {
    /// `NOTIFICATIONS_TOPIC`, `DEAD_LETTER_TOPIC`, `APPS`, `TRUSTED_ROOTS`, `POSTGRES_*`, `KAFKA_*`, `APPSTORE_*`.
    package var settings: PipelineSettings
    /// `WORKER_GROUP_ID`: the consumer group every worker of a deployment shares.
    package var groupId = "appstore-worker"
    /// `WORKER_INSTANCE_ID`: this worker's static membership of the group (`group.instance.id`). A worker that
    /// restarts under the same name within the session timeout gets its own partitions back and no other worker
    /// rebalances, so a rolling restart moves nothing (docs/scale.md). It must be stable per replica and unique in
    /// the group: a StatefulSet pod's name, not a Deployment's (each new pod has a new name, and a static member
    /// that goes away leaves its partitions idle until the session timeout). Unset: dynamic membership.
    package var instanceId: String?
    /// `WORKER_BATCH_SIZE`: records per batch (one PostgreSQL transaction each). What the worker holds in memory
    /// follows it: three batches in flight (one written, one verified, one polled ahead), each record as bytes and
    /// parsed content, and a pre-fetch queue sized from it (`consumerConfiguration`). With 250 a worker stayed at
    /// 104-118 MB steady, 117-132 MB peak in worker-bench with the image's malloc settings (one worker 2 700-3 160
    /// notifications/s, 2026-11-26); with 500, 172-192 MB before those settings (docs/benchmarks.md).
    package var batchSize = 250
    /// `WORKER_MAX_BACKOFF`: longest pause between retries of a batch that failed transiently.
    package var maximumBackoff: Duration = .seconds(30)
    /// `WORKER_STORE_TIMEOUT`: longest a batch's transaction may take before it counts as a transient failure
    /// (the database unreachable: the pool waits for a connection rather than failing). Migrations get 4×.
    package var storeTimeout: Duration = .seconds(30)
    /// `WORKER_MIGRATE`: apply pending schema migrations at start (under the advisory lock). Turn off when a
    /// separate migrate job (`pipelinectl migrate`) owns the schema.
    package var migrateAtStart = true
    /// `WORKER_OPS_HOST` / `WORKER_OPS_PORT`: where `/health/live`, `/health/ready` and `/metrics` are served.
    package var opsHost = "0.0.0.0"
    package var opsPort = 8081
    /// Entitlement events (`EVENTS_*`): the outbox each batch writes, and the relay to the events topic.
    package var events = EventsConfiguration()
    /// `HEAL_INTERVAL`: how often a worker looks for contradicted rows to pull (default 10 s); it heals only
    /// when Apple's key is configured (`APPSTORE_*`).
    package var healInterval: Duration = .seconds(10)
    /// `HEAL_RETRY_AFTER`: a row whose pull did not resolve it is pulled again after this (default 5 minutes).
    package var healRetryAfter: Duration = .seconds(300)
    /// How long each database store keeps rows (`ARCHIVE_RETENTION_DAYS`, …: `RetentionPolicy`).
    package var retention = RetentionPolicy()
    /// `RETENTION_INTERVAL` (default 1h; `off` to leave pruning to `pipelinectl retention run`): how often a worker
    /// prunes what is past its retention and runs queued erasures (one worker of the group at a time).
    package var retentionInterval: Duration? = .seconds(3600)
    /// `METRIC_ROLLUPS_INTERVAL` (default 30 s): how often one worker of the group applies the subscriptions changed
    /// since the metrics' daily rollups last saw them (docs/scale.md, "Metrics from rollups").
    package var metricRollupsInterval: Duration = .seconds(30)

    package init(kafka: KafkaClientConfigurationValues) {
        settings = PipelineSettings(kafka: kafka)
    }

    /// The shared settings, read and written as the worker's own.
    package subscript<Value>(dynamicMember keyPath: WritableKeyPath<PipelineSettings, Value>) -> Value {
        get { settings[keyPath: keyPath] }
        set { settings[keyPath: keyPath] = newValue }
    }

    /// The worker's own settings, each described once: the parser below, `worker --help` and docs/worker.md's table
    /// of them read these (the shared ones are `PipelineSettings`', `EventsConfiguration`'s and `RetentionPolicy`'s).
    enum Settings {
        static let groupId = Setting.string("WORKER_GROUP_ID", default: "appstore-worker", "the consumer group every worker of a deployment joins")
        static let instanceId = SettingDescription(
            variable: "WORKER_INSTANCE_ID",
            summary: "static group membership (`group.instance.id`): a stable name per replica, such as a StatefulSet pod's; a restart within the session timeout keeps its partitions and rebalances no one. Unset: dynamic membership",
            defaultText: nil)
        static let batchSize = Setting.int(
            "WORKER_BATCH_SIZE", default: 250, range: 1...10_000,
            "records per batch, one PostgreSQL transaction each; librdkafka's pre-fetch follows it (48 KiB a record)")
        static let maximumBackoff = Setting.duration(
            "WORKER_MAX_BACKOFF", default: .seconds(30), range: .milliseconds(100) ... .seconds(600), deprecatedMilliseconds: "WORKER_MAX_BACKOFF_MS",
            "longest pause between retries of a batch that failed transiently")
        static let storeTimeout = Setting.duration(
            "WORKER_STORE_TIMEOUT", default: .seconds(30), range: .milliseconds(500) ... .seconds(600), deprecatedMilliseconds: "WORKER_STORE_TIMEOUT_MS",
            "longest a batch's transaction may take before it counts as a transient failure and is retried (migrations get 4×)")
        static let migrate = Setting.bool("WORKER_MIGRATE", default: true, "apply pending migrations at start, under the advisory lock")
        static let ops = OpsListenerSettings(prefix: "WORKER", port: 8081)
        static let (opsHost, opsPort) = (ops.host, ops.port)
        static let healInterval = Setting.duration(
            "HEAL_INTERVAL", default: .seconds(10), range: .milliseconds(100) ... .seconds(3_600), deprecatedMilliseconds: "HEAL_INTERVAL_MS",
            "how often a worker looks for rows that contradict Apple (with `APPSTORE_*` set)")
        static let healRetryAfter = Setting.duration(
            "HEAL_RETRY_AFTER", default: .seconds(300), range: .milliseconds(100) ... .seconds(86_400), deprecatedMilliseconds: "HEAL_RETRY_AFTER_MS",
            "a row its pull did not resolve is pulled again after this")
        static let retentionInterval = SettingDescription(
            variable: "RETENTION_INTERVAL", summary: "how often one worker of the group prunes what is past its retention and runs queued erasures; `off` leaves it to `pipelinectl retention run`",
            defaultText: "1h")
        static let metricRollupsInterval = Setting.duration(
            "METRIC_ROLLUPS_INTERVAL", default: .seconds(30), range: .seconds(1) ... .seconds(3_600),
            "how often one worker of the group applies the changed subscriptions to the metrics' daily rollups (a metric read applies what is left)")

        static let catalog = SettingsCatalog(component: "worker", settings: [
            groupId.description, instanceId, batchSize.description, maximumBackoff.description, storeTimeout.description, migrate.description,
            opsHost.description, opsPort.description, healInterval.description, healRetryAfter.description, retentionInterval,
            metricRollupsInterval.description,
        ])
    }

    /// The worker's own settings, for `--help`, the docs and `pipelinectl settings worker`.
    package static var catalog: SettingsCatalog { Settings.catalog }

    /// The environment variables the worker reads (for documentation and the deployment consistency check).
    package static let environmentKeys = Settings.catalog.environmentKeys
        + PipelineSettings.environmentKeys + EventsConfiguration.environmentKeys + RetentionPolicy.environmentKeys

    package static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> WorkerConfiguration {
        var configuration = WorkerConfiguration(kafka: KafkaClientConfigurationValues(bootstrapServers: [], clientId: ""))
        configuration.settings = try PipelineSettings.fromEnvironment(environment, defaultClientId: "appstore-worker")
        configuration.groupId = try Settings.groupId.read(environment)
        if let instanceId = environment.optionalString(Settings.instanceId.variable) {
            // Kafka's rule for group.instance.id (as for topic names): librdkafka would only fail at the join.
            guard instanceId.count <= 249, instanceId.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }) else {
                throw ConfigurationError(variable: Settings.instanceId.variable, reason: "must be at most 249 of a-z, A-Z, 0-9, '.', '_' and '-' (got \"\(instanceId)\")")
            }
            configuration.instanceId = instanceId
        }
        configuration.batchSize = try Settings.batchSize.read(environment)
        configuration.maximumBackoff = try Settings.maximumBackoff.read(environment)
        configuration.storeTimeout = try Settings.storeTimeout.read(environment)
        configuration.migrateAtStart = try Settings.migrate.read(environment)
        configuration.opsHost = try Settings.opsHost.read(environment)
        configuration.opsPort = try Settings.opsPort.read(environment)
        configuration.events = try EventsConfiguration.fromEnvironment(environment)
        configuration.healInterval = try Settings.healInterval.read(environment)
        configuration.healRetryAfter = try Settings.healRetryAfter.read(environment)
        configuration.retention = try RetentionPolicy.fromEnvironment(environment)
        configuration.metricRollupsInterval = try Settings.metricRollupsInterval.read(environment)
        let retentionInterval = Settings.retentionInterval.variable
        if environment.optionalString(retentionInterval)?.lowercased() == "off" {
            configuration.retentionInterval = nil
        } else {
            configuration.retentionInterval = try environment.duration(retentionInterval, default: .seconds(3600))
        }
        return configuration
    }

    /// The consumer: offsets stored only after the work is durable (KafkaConsumerConfiguration's defaults).
    package var consumerConfiguration: KafkaConsumerConfiguration {
        var configuration = KafkaConsumerConfiguration(client: settings.kafka.clientConfiguration, groupId: groupId)
        configuration.groupInstanceId = instanceId
        // A quiet stream's record (a customer API purchase waiting for its worker) must not wait for librdkafka's
        // 500 ms on brokers that hold an empty fetch that long: 265 ms → 29 ms at p50 on the bundled one. At most
        // 20 idle fetches a second; Apache Kafka answers at once anyway. KAFKA_CONFIG_FETCH_WAIT_MAX_MS overrides it.
        configuration.fetchWaitMaxMilliseconds = 50
        // Pre-fetch sized from the batch: 48 KiB a record, about three batches of 16 KB notifications (11.7 MiB
        // for 250), a fourth being the batch polled ahead. Measured (worker-bench, 20 000 notifications, 2026-11-26):
        // with 64 KiB a record one worker peaked at 138-159 MB, with 48 KiB at 136-144 MB. A full queue is
        // refilled 10 ms after it drained below this, not librdkafka's 1 s (`fetchQueueBackoffMilliseconds`): with
        // the 1 s, a smaller queue ran dry and the worker waited for fetches a third of the time.
        // KAFKA_CONFIG_QUEUED_MAX_MESSAGES_KBYTES and KAFKA_CONFIG_FETCH_QUEUE_BACKOFF_MS override them.
        configuration.maximumPrefetchKilobytes = max(1024, batchSize * 48)
        return configuration
    }

    /// The events relay's producer: idempotent, `acks=all`, and gapless (a failure that could leave a gap in a
    /// partition stops the instance, which is replaced, instead of letting a later record through).
    package var eventsProducerConfiguration: KafkaProducerConfiguration {
        var producer = KafkaProducerConfiguration(client: settings.kafka.clientConfiguration)
        producer.client.additionalConfig["enable.gapless.guarantee"] = "true"
        return producer
    }

    /// The dead-letter producer: durable (acks=all, idempotent), like ingest's.
    package var deadLetterProducerConfiguration: KafkaProducerConfiguration {
        var producer = KafkaProducerConfiguration(client: settings.kafka.clientConfiguration)
        producer.deliveryTimeoutMilliseconds = 30_000
        return producer
    }
}

extension WorkerConfiguration {
    /// `worker --help`: printed before anything is read, so it works with an empty environment.
    package static var help: String {
        """
        worker: verifies each notification record, dedupes it and applies it to PostgreSQL in one transaction per batch;
        dead-letters what can never verify; relays entitlement events; heals rows that contradict Apple. Configured by the
        environment (durations as 500ms, 10s, 5m). Its own settings:
        \(Settings.catalog.helpLines)
        And those it shares with the other services:
        \(PipelineSettings.catalog.helpLines)
        \(KafkaEnvironment.catalog.helpLines)
          APPSTORE_KEY_ID, APPSTORE_ISSUER_ID, APPSTORE_PRIVATE_KEY_FILE, ...   Apple's API key (docs/app-store-server-api.md)
          ARCHIVE_RETENTION_DAYS, DEAD_LETTER_RECORD_RETENTION_DAYS, PURCHASE_CLAIM_RETENTION_DAYS,
          CONSUMPTION_REQUEST_RETENTION_DAYS, CONSOLE_AUDIT_RETENTION_DAYS, ERASED_EVENT_IDS_RETENTION_DAYS,
          OFFER_SIGNATURE_RETENTION_DAYS, WEBHOOK_DELIVERY_RETENTION       each store's retention: days or keep (docs/privacy.md)
        Entitlement events and their relay (docs/events.md):
        \(EventsConfiguration.catalog.helpLines)
        docs/worker.md.
        """
    }
}
