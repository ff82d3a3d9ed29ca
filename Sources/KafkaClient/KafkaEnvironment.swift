import PipelineConfiguration

/// Settings every process that talks to Kafka shares.
public enum KafkaEnvironment {
    /// Each described once: the reader below, the services' `--help` and docs/kafka-client.md's table read these.
    enum Settings {
        static let bootstrapServers = SettingDescription(
            variable: "KAFKA_BOOTSTRAP_SERVERS", summary: "the brokers, comma-separated (required)", defaultText: nil)
        static let clientId = SettingDescription(
            variable: "KAFKA_CLIENT_ID", summary: "the client id in the brokers' logs (default: the service's, e.g. `appstore-worker`)", defaultText: nil)
        static let statisticsInterval = Setting.duration(
            "KAFKA_STATISTICS_INTERVAL", default: .zero, range: .zero ... .seconds(3_600), deprecatedMilliseconds: "KAFKA_STATISTICS_INTERVAL_MS",
            "librdkafka's statistics to `/metrics` this often (`0s`: off)")
        static let passThrough = SettingDescription(
            variable: "KAFKA_CONFIG_*",
            summary: "any librdkafka setting: `KAFKA_CONFIG_SECURITY_PROTOCOL=SASL_SSL` is `security.protocol`; `enable.auto.offset.store`, `enable.auto.commit`, `enable.idempotence`, `acks` and `group.id` are refused at start (the guarantees rest on them)",
            defaultText: nil)

        static let catalog = SettingsCatalog(
            component: "kafka", settings: [bootstrapServers, clientId, statisticsInterval.description, passThrough])
    }

    /// The broker settings, for `--help`, the docs and `pipelinectl settings kafka`.
    public static var catalog: SettingsCatalog { Settings.catalog }

    /// `KAFKA_BOOTSTRAP_SERVERS` (required), `KAFKA_CLIENT_ID`, `KAFKA_STATISTICS_INTERVAL` and `KAFKA_CONFIG_*` passed
    /// to librdkafka (e.g. `KAFKA_CONFIG_SECURITY_PROTOCOL=SASL_SSL`, `KAFKA_CONFIG_SASL_PASSWORD=...`).
    public static let keys = Settings.catalog.environmentKeys

    /// librdkafka settings the pipeline's guarantees rest on: offsets stored only after the write is durable,
    /// committed only what was stored, durable idempotent produce, one group named by its own variable. A
    /// `KAFKA_CONFIG_*` override of one of them is refused at start, naming the variable.
    public static let protectedSettings: [String: String] = [
        "enable.auto.offset.store": "offsets are stored only once a batch is durable in PostgreSQL",
        "enable.auto.commit": "only stored offsets are committed, in the background and before a revoke",
        "enable.idempotence": "the producer must neither duplicate nor reorder records on retries",
        "acks": "a 200 (and a dead letter) counts only once every in-sync replica has the record",
        "group.id": "the group is named by WORKER_GROUP_ID (and pipelinectl --group)",
    ]

    public static func client(_ environment: EnvironmentReader, defaultClientId: String) throws(ConfigurationError) -> KafkaClientConfigurationValues {
        let servers = environment.list(Settings.bootstrapServers.variable, default: [])
        let additional = environment.librdkafkaSettings(prefix: "KAFKA_CONFIG_")
        for key in additional.keys.sorted() {
            if let why = protectedSettings[key] {
                let variable = "KAFKA_CONFIG_" + key.uppercased().replacingOccurrences(of: ".", with: "_")
                throw ConfigurationError(variable: variable, reason: "\(key) cannot be overridden: \(why)")
            }
        }
        return KafkaClientConfigurationValues(
            bootstrapServers: servers.isEmpty ? [try environment.required(Settings.bootstrapServers.variable)] : servers,
            clientId: environment.string(Settings.clientId.variable, default: defaultClientId),
            // librdkafka's `statistics.interval.ms`: whole milliseconds.
            statisticsIntervalMilliseconds: Int(try Settings.statisticsInterval.read(environment).wholeMilliseconds),
            additionalConfig: additional)
    }
}

/// The Kafka client values read from the environment (kept free of KafkaClient types so configuration parsing
/// can be tested without librdkafka).
public struct KafkaClientConfigurationValues: Sendable, Hashable {
    public var bootstrapServers: [String]
    public var clientId: String
    public var statisticsIntervalMilliseconds: Int
    public var additionalConfig: [String: String]

    public init(bootstrapServers: [String], clientId: String, statisticsIntervalMilliseconds: Int = 0, additionalConfig: [String: String] = [:]) {
        self.bootstrapServers = bootstrapServers
        self.clientId = clientId
        self.statisticsIntervalMilliseconds = statisticsIntervalMilliseconds
        self.additionalConfig = additionalConfig
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
