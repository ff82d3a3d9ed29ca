import AppStoreNotifications
import AppStoreServerAPI
import EntitlementEvents
import EntitlementStore
import Foundation
import KafkaClient
import PostgresNIO

/// Everything the worker is configured with. Read from the environment by `fromEnvironment`.
public struct WorkerConfiguration: Sendable {
    /// `NOTIFICATIONS_TOPIC`: the topic ingest produces to.
    public var topic = "appstore.notifications.v2"
    /// `DEAD_LETTER_TOPIC`: where permanently failing records go (default: the topic + `.dead-letter`).
    public var deadLetterTopic = "appstore.notifications.v2.dead-letter"
    /// `WORKER_GROUP_ID`: the consumer group every worker of a deployment shares.
    public var groupId = "appstore-worker"
    /// `WORKER_BATCH_SIZE`: records per batch (one PostgreSQL transaction each). What the worker holds in memory
    /// follows it: three batches in flight (one written, one verified, one polled ahead), each record as bytes and
    /// parsed content, and a pre-fetch queue sized from it (`consumerConfiguration`). With 250 a worker stayed at
    /// 104-118 MB steady, 117-132 MB peak in worker-bench with the image's malloc settings (one worker 2 700-3 160
    /// notifications/s, 2026-11-26); with 500, 172-192 MB before those settings (docs/benchmarks.md).
    public var batchSize = 250
    /// `WORKER_MAX_BACKOFF_MS`: longest pause between retries of a batch that failed transiently.
    public var maximumBackoff: Duration = .seconds(30)
    /// `WORKER_STORE_TIMEOUT_MS`: longest a batch's transaction may take before it counts as a transient failure
    /// (the database unreachable: the pool waits for a connection rather than failing). Migrations get 4×.
    public var storeTimeout: Duration = .seconds(30)
    /// `WORKER_MIGRATE`: apply pending schema migrations at start (under the advisory lock). Turn off when a
    /// separate migrate job (`pipelinectl migrate`) owns the schema.
    public var migrateAtStart = true
    /// `WORKER_OPS_HOST` / `WORKER_OPS_PORT`: where `/health/live`, `/health/ready` and `/metrics` are served.
    public var opsHost = "0.0.0.0"
    public var opsPort = 8081
    /// `POSTGRES_URL` (required): `postgres://user[:password]@host[:port]/database`.
    public var postgresURL = ""
    /// `POSTGRES_POOL_SIZE`: connections per worker process.
    public var postgresPoolSize = 4
    /// `APPS` (required): the apps whose notifications are accepted, comma-separated
    /// `bundleId[:appAppleId][@Environment+Environment]`, e.g. `com.example.app:1234567890@Production+Sandbox`.
    /// Without environments an app is accepted in Production and Sandbox; Production requires the App Apple ID.
    public var apps: [AppIdentity] = []
    /// `TRUSTED_ROOTS`: comma-separated root certificates: `apple` (the embedded Apple Root CA - G3) and/or
    /// paths of PEM or DER files. Default `apple`. Anything else is for tests and the demo only.
    public var trustedRoots: [String] = ["apple"]
    /// Kafka connection settings (`KAFKA_*`).
    public var kafka: KafkaClientConfigurationValues
    /// Entitlement events (`EVENTS_*`): the outbox each batch writes, and the relay to the events topic.
    public var events = EventsConfiguration()
    /// The `APPSTORE_*` variables when `APPSTORE_KEY_ID` is set (checked at start-up for every configured
    /// environment): the worker then heals contradicted rows itself by pulling Apple's statuses.
    public var appStoreVariables: [String: String]?
    /// `HEAL_INTERVAL_MS`: how often a worker looks for contradicted rows to pull (default 10 s).
    public var healInterval: Duration = .seconds(10)
    /// `HEAL_RETRY_AFTER_MS`: a row whose pull did not resolve it is pulled again after this (default 5 minutes).
    public var healRetryAfter: Duration = .seconds(300)

    public init(kafka: KafkaClientConfigurationValues) {
        self.kafka = kafka
    }

    /// The environment variables the worker reads (for documentation and the deployment consistency check).
    public static let environmentKeys = [
        "NOTIFICATIONS_TOPIC", "DEAD_LETTER_TOPIC", "WORKER_GROUP_ID", "WORKER_BATCH_SIZE", "WORKER_MAX_BACKOFF_MS", "WORKER_STORE_TIMEOUT_MS", "WORKER_MIGRATE",
        "WORKER_OPS_HOST", "WORKER_OPS_PORT", "POSTGRES_URL", "POSTGRES_POOL_SIZE", "APPS", "TRUSTED_ROOTS", "LOG_LEVEL",
        "HEAL_INTERVAL_MS", "HEAL_RETRY_AFTER_MS",
    ] + KafkaEnvironment.keys + EventsConfiguration.environmentKeys + OperationsConfiguration.appStoreKeys

    public static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> WorkerConfiguration {
        var configuration = WorkerConfiguration(kafka: try KafkaEnvironment.client(environment, defaultClientId: "appstore-worker"))
        configuration.topic = environment.string("NOTIFICATIONS_TOPIC", default: configuration.topic)
        configuration.deadLetterTopic = environment.string("DEAD_LETTER_TOPIC", default: configuration.topic + ".dead-letter")
        configuration.groupId = environment.string("WORKER_GROUP_ID", default: configuration.groupId)
        configuration.batchSize = try environment.int("WORKER_BATCH_SIZE", default: configuration.batchSize, range: 1...10_000)
        configuration.maximumBackoff = .milliseconds(try environment.int("WORKER_MAX_BACKOFF_MS", default: 30_000, range: 100...600_000))
        configuration.storeTimeout = .milliseconds(try environment.int("WORKER_STORE_TIMEOUT_MS", default: 30_000, range: 500...600_000))
        configuration.migrateAtStart = try environment.bool("WORKER_MIGRATE", default: configuration.migrateAtStart)
        configuration.opsHost = environment.string("WORKER_OPS_HOST", default: configuration.opsHost)
        configuration.opsPort = try environment.int("WORKER_OPS_PORT", default: configuration.opsPort, range: 0...65535)
        configuration.postgresURL = try environment.required("POSTGRES_URL")
        do {
            _ = try PostgresClient.Configuration(url: configuration.postgresURL)
        } catch {
            throw ConfigurationError(variable: "POSTGRES_URL", reason: "\(error)")
        }
        configuration.postgresPoolSize = try environment.int("POSTGRES_POOL_SIZE", default: configuration.postgresPoolSize, range: 1...100)
        configuration.apps = try Self.parseApps(try environment.required("APPS"))
        configuration.trustedRoots = environment.list("TRUSTED_ROOTS", default: configuration.trustedRoots)
        configuration.events = try EventsConfiguration.fromEnvironment(environment)
        configuration.healInterval = .milliseconds(try environment.int("HEAL_INTERVAL_MS", default: 10_000, range: 100...3_600_000))
        configuration.healRetryAfter = .milliseconds(try environment.int("HEAL_RETRY_AFTER_MS", default: 300_000, range: 100...86_400_000))
        if environment.optionalString("APPSTORE_KEY_ID") != nil {
            let variables = Dictionary(uniqueKeysWithValues: OperationsConfiguration.appStoreKeys.compactMap { key in environment.optionalString(key).map { (key, $0) } })
            for app in configuration.apps {
                for target in app.environments where target == .production || target == .sandbox {
                    do {
                        _ = try AppStoreServerAPIConfiguration.fromEnvironment(variables, environment: target)
                    } catch {
                        throw ConfigurationError(variable: error.variable, reason: error.reason)
                    }
                }
            }
            configuration.appStoreVariables = variables
        }
        return configuration
    }

    /// `bundleId[:appAppleId][@Environment+Environment]`, comma-separated.
    public static func parseApps(_ text: String) throws(ConfigurationError) -> [AppIdentity] {
        var apps: [AppIdentity] = []
        for entry in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            let parts = entry.split(separator: "@", maxSplits: 1).map(String.init)
            let identity = parts[0].split(separator: ":", maxSplits: 1).map(String.init)
            guard let bundleId = identity.first, !bundleId.isEmpty else {
                throw ConfigurationError(variable: "APPS", reason: "\"\(entry)\" has no bundle id")
            }
            var appAppleId: Int64?
            if identity.count == 2 {
                guard let id = Int64(identity[1]), id > 0 else { throw ConfigurationError(variable: "APPS", reason: "\"\(identity[1])\" in \"\(entry)\" is not an App Apple ID") }
                appAppleId = id
            }
            var environments: Set<AppStoreNotifications.Environment> = [.production, .sandbox]
            if parts.count == 2 {
                environments = []
                for name in parts[1].split(separator: "+") {
                    guard let environment = AppStoreNotifications.Environment(rawValue: String(name)), environment.isSignedByApple else {
                        throw ConfigurationError(variable: "APPS", reason: "\"\(name)\" in \"\(entry)\" is not Production or Sandbox (Xcode and LocalTesting data is not signed by Apple)")
                    }
                    environments.insert(environment)
                }
            }
            if environments.contains(.production) && appAppleId == nil {
                throw ConfigurationError(variable: "APPS", reason: "\"\(entry)\" accepts Production, which needs the App Apple ID (bundleId:appAppleId), as Apple's library requires")
            }
            apps.append(AppIdentity(bundleId: bundleId, appAppleId: appAppleId, environments: environments))
        }
        guard !apps.isEmpty else { throw ConfigurationError(variable: "APPS", reason: "names no app") }
        return apps
    }

    /// The verifier's settings: the configured apps and roots (file contents read here, so a bad file fails start-up).
    public func verifierConfiguration() throws(ConfigurationError) -> SignedPayloadVerifier.Configuration {
        var roots: [[UInt8]] = []
        for entry in trustedRoots {
            do {
                if entry.lowercased() == "apple" {
                    roots.append(try AppleRootCertificate.derBytes)
                } else {
                    guard let data = FileManager.default.contents(atPath: entry) else {
                        throw ConfigurationError(variable: "TRUSTED_ROOTS", reason: "cannot read \(entry)")
                    }
                    roots += try TrustAnchorLoader.certificates(in: [UInt8](data))
                }
            } catch let error as ConfigurationError {
                throw error
            } catch {
                throw ConfigurationError(variable: "TRUSTED_ROOTS", reason: "\(entry): \(error)")
            }
        }
        do {
            return try SignedPayloadVerifier.Configuration(apps: apps, trustedRoots: roots)
        } catch {
            throw ConfigurationError(variable: "TRUSTED_ROOTS", reason: "\(error)")
        }
    }

    /// The consumer: offsets stored only after the work is durable (KafkaConsumerConfiguration's defaults).
    public var consumerConfiguration: KafkaConsumerConfiguration {
        var configuration = KafkaConsumerConfiguration(client: kafka.clientConfiguration, groupId: groupId)
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
    public var eventsProducerConfiguration: KafkaProducerConfiguration {
        var producer = KafkaProducerConfiguration(client: kafka.clientConfiguration)
        producer.client.additionalConfig["enable.gapless.guarantee"] = "true"
        return producer
    }

    /// The dead-letter producer: durable (acks=all, idempotent), like ingest's.
    public var deadLetterProducerConfiguration: KafkaProducerConfiguration {
        var producer = KafkaProducerConfiguration(client: kafka.clientConfiguration)
        producer.deliveryTimeoutMilliseconds = 30_000
        return producer
    }

    /// The PostgreSQL pool.
    public func postgresConfiguration() throws -> PostgresClient.Configuration {
        var configuration = try PostgresClient.Configuration(url: postgresURL)
        configuration.options.maximumConnections = postgresPoolSize
        return configuration
    }
}

extension KafkaClientConfigurationValues {
    /// As the Kafka client's configuration.
    public var clientConfiguration: KafkaClientConfiguration {
        KafkaClientConfiguration(
            bootstrapServers: bootstrapServers, clientId: clientId, statisticsIntervalMilliseconds: statisticsIntervalMilliseconds,
            additionalConfig: additionalConfig)
    }
}
