import AppStoreNotifications
import Foundation

/// A configuration value that is missing or malformed. Start-up fails with it, naming the variable.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public var variable: String
    public var reason: String
    public var description: String { "configuration \(variable): \(reason)" }

    public init(variable: String, reason: String) {
        self.variable = variable
        self.reason = reason
    }
}

/// Reads configuration from environment variables (12-factor): defaults for everything that has a sensible
/// one, a clear error naming the variable for what is missing or malformed.
public struct EnvironmentReader: Sendable {
    public let values: [String: String]

    public init(_ values: [String: String] = ProcessInfo.processInfo.environment) {
        self.values = values
    }

    public func string(_ key: String, default defaultValue: String) -> String {
        values[key].flatMap { $0.isEmpty ? nil : $0 } ?? defaultValue
    }

    public func optionalString(_ key: String) -> String? {
        values[key].flatMap { $0.isEmpty ? nil : $0 }
    }

    public func required(_ key: String) throws(ConfigurationError) -> String {
        guard let value = optionalString(key) else { throw ConfigurationError(variable: key, reason: "is required and not set") }
        return value
    }

    public func int(_ key: String, default defaultValue: Int, range: ClosedRange<Int> = 0...Int.max) throws(ConfigurationError) -> Int {
        guard let text = optionalString(key) else { return defaultValue }
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError(variable: key, reason: "\"\(text)\" is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// A duration as operators write it (`90s`, `30m`, `24h`, `7d`: `DurationText`), or `defaultValue` when unset.
    public func duration(_ key: String, default defaultValue: Duration) throws(ConfigurationError) -> Duration {
        guard let text = optionalString(key) else { return defaultValue }
        guard let milliseconds = DurationText.milliseconds(text) else {
            throw ConfigurationError(variable: key, reason: "\(UntrustedText.quoted(text, limit: 40)) is not a duration (e.g. 90s, 30m, 24h, 7d)")
        }
        return .milliseconds(milliseconds)
    }

    public func bool(_ key: String, default defaultValue: Bool) throws(ConfigurationError) -> Bool {
        guard let text = optionalString(key)?.lowercased() else { return defaultValue }
        switch text {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw ConfigurationError(variable: key, reason: "\"\(text)\" is not a boolean (true/false)")
        }
    }

    /// librdkafka settings passed through: `PREFIX` + `SASL_USERNAME` becomes `sasl.username`.
    public func librdkafkaSettings(prefix: String) -> [String: String] {
        var settings: [String: String] = [:]
        for (key, value) in values where key.hasPrefix(prefix) && key.count > prefix.count {
            settings[key.dropFirst(prefix.count).lowercased().replacingOccurrences(of: "_", with: ".")] = value
        }
        return settings
    }

    /// Comma-separated list.
    public func list(_ key: String, default defaultValue: [String]) -> [String] {
        guard let text = optionalString(key) else { return defaultValue }
        return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}

/// Settings every process that talks to Kafka shares.
public enum KafkaEnvironment {
    /// `KAFKA_BOOTSTRAP_SERVERS` (required), `KAFKA_CLIENT_ID`, and `KAFKA_CONFIG_*` passed to librdkafka
    /// (e.g. `KAFKA_CONFIG_SECURITY_PROTOCOL=SASL_SSL`, `KAFKA_CONFIG_SASL_PASSWORD=...`).
    public static let keys = ["KAFKA_BOOTSTRAP_SERVERS", "KAFKA_CLIENT_ID", "KAFKA_CONFIG_*", "KAFKA_STATISTICS_INTERVAL_MS"]

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
        let servers = environment.list("KAFKA_BOOTSTRAP_SERVERS", default: [])
        let additional = environment.librdkafkaSettings(prefix: "KAFKA_CONFIG_")
        for key in additional.keys.sorted() {
            if let why = protectedSettings[key] {
                let variable = "KAFKA_CONFIG_" + key.uppercased().replacingOccurrences(of: ".", with: "_")
                throw ConfigurationError(variable: variable, reason: "\(key) cannot be overridden: \(why)")
            }
        }
        return KafkaClientConfigurationValues(
            bootstrapServers: servers.isEmpty ? [try environment.required("KAFKA_BOOTSTRAP_SERVERS")] : servers,
            clientId: environment.string("KAFKA_CLIENT_ID", default: defaultClientId),
            statisticsIntervalMilliseconds: try environment.int("KAFKA_STATISTICS_INTERVAL_MS", default: 0),
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
