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

extension Duration {
    fileprivate func checked(_ variable: String, within range: ClosedRange<Duration>?) throws(ConfigurationError) -> Duration {
        guard let range, !range.contains(self) else { return self }
        throw ConfigurationError(variable: variable, reason: "\(DurationText.text(self)) is outside \(DurationText.text(range.lowerBound))…\(DurationText.text(range.upperBound))")
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

    /// A duration as operators write it (`500ms`, `90s`, `30m`, `24h`, `7d`: `DurationText`), or `defaultValue` when
    /// unset. `deprecatedMilliseconds` names the variable's old form (`…_MS`, a whole number of milliseconds), still
    /// read when the new one is unset (docs/configuration.md lists both).
    public func duration(
        _ key: String, default defaultValue: Duration, range: ClosedRange<Duration>? = nil, deprecatedMilliseconds: String? = nil
    ) throws(ConfigurationError) -> Duration {
        let value: Duration
        if let text = optionalString(key) {
            guard let parsed = DurationText.duration(text, allowingZero: range?.contains(.zero) ?? false) else {
                throw ConfigurationError(variable: key, reason: "\(Self.quoted(text)) is not a duration (e.g. 500ms, 90s, 30m, 24h, 7d)")
            }
            value = parsed
        } else if let old = deprecatedMilliseconds, optionalString(old) != nil {
            let maximum = range.map { Int($0.upperBound.components.seconds) * 1_000 } ?? Int.max / 2
            return try Duration.milliseconds(try int(old, default: 0, range: 0...maximum)).checked(old, within: range)
        } else {
            return defaultValue
        }
        return try value.checked(key, within: range)
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

    /// `text` quoted for an error message, control characters escaped, at most 40 characters.
    static func quoted(_ text: String) -> String {
        String(reflecting: text.count > 40 ? String(text.prefix(40)) + "…" : text)
    }
}
