import Foundation

/// One setting, described once: its variable, what it means, its default as a person writes it, and the older
/// variable it replaces (still read, documented as deprecated). The parser reads it, `--help` prints it, and the
/// docs' configuration tables are generated from it (`pipelinectl settings --markdown`), so the four can't drift.
public struct SettingDescription: Sendable, Hashable {
    public var variable: String
    public var summary: String
    /// The default as written in the environment (`10s`, `8080`); nil for a required setting or a computed default.
    public var defaultText: String?
    /// The older variable still read when this one is unset (a `…_MS` whole number of milliseconds).
    public var deprecated: String?

    public init(variable: String, summary: String, defaultText: String?, deprecated: String? = nil) {
        self.variable = variable
        self.summary = summary
        self.defaultText = defaultText
        self.deprecated = deprecated
    }
}

/// A typed setting: its description and how it is read.
public struct Setting<Value: Sendable>: Sendable {
    public let description: SettingDescription
    let reader: @Sendable (EnvironmentReader) throws(ConfigurationError) -> Value

    public init(_ description: SettingDescription, read: @escaping @Sendable (EnvironmentReader) throws(ConfigurationError) -> Value) {
        self.description = description
        self.reader = read
    }

    /// The value in `environment`, or the default.
    public func read(_ environment: EnvironmentReader) throws(ConfigurationError) -> Value {
        try reader(environment)
    }
}

extension Setting where Value == String {
    public static func string(_ variable: String, default value: String, _ summary: String) -> Self {
        Self(SettingDescription(variable: variable, summary: summary, defaultText: value)) { environment in environment.string(variable, default: value) }
    }
}

extension Setting where Value == Int {
    public static func int(_ variable: String, default value: Int, range: ClosedRange<Int>, _ summary: String) -> Self {
        Self(SettingDescription(variable: variable, summary: summary, defaultText: String(value))) { environment throws(ConfigurationError) in
            try environment.int(variable, default: value, range: range)
        }
    }
}

extension Setting where Value == Double {
    /// A rate (a number a second, fractions allowed) within `range`; `0` where the range allows it turns a limit off.
    public static func rate(_ variable: String, default value: Double, range: ClosedRange<Double>, _ summary: String) -> Self {
        Self(SettingDescription(variable: variable, summary: summary, defaultText: value.rounded() == value ? String(Int(value)) : String(value))) {
            environment throws(ConfigurationError) in
            guard let text = environment.optionalString(variable) else { return value }
            guard let rate = Double(text), range.contains(rate) else {
                throw ConfigurationError(variable: variable, reason: "\"\(text.prefix(40))\" is not a number a second from \(Int(range.lowerBound)) to \(Int(range.upperBound))")
            }
            return rate
        }
    }
}

extension Setting where Value == Bool {
    public static func bool(_ variable: String, default value: Bool, _ summary: String) -> Self {
        Self(SettingDescription(variable: variable, summary: summary, defaultText: String(value))) { environment throws(ConfigurationError) in
            try environment.bool(variable, default: value)
        }
    }
}

extension Setting where Value == Duration {
    /// A duration (`500ms`, `10s`), within `range` when one is given; `deprecatedMilliseconds` names the older `…_MS`
    /// variable still read.
    public static func duration(
        _ variable: String, default value: Duration, range: ClosedRange<Duration>? = nil, deprecatedMilliseconds: String? = nil, _ summary: String
    ) -> Self {
        Self(SettingDescription(variable: variable, summary: summary, defaultText: DurationText.text(value), deprecated: deprecatedMilliseconds)) {
            environment throws(ConfigurationError) in
            try environment.duration(variable, default: value, range: range, deprecatedMilliseconds: deprecatedMilliseconds)
        }
    }
}

/// A component's settings, in the order `--help` and the docs list them.
public struct SettingsCatalog: Sendable {
    /// The service's name, as `pipelinectl settings` takes it.
    public var component: String
    public var settings: [SettingDescription]

    public init(component: String, settings: [SettingDescription]) {
        self.component = component
        self.settings = settings
    }

    /// Every variable read, the deprecated ones included (the deployment consistency test's list).
    public var environmentKeys: [String] { settings.flatMap { [$0.variable] + ($0.deprecated.map { [$0] } ?? []) } }

    /// The `--help` lines: variable, meaning, default.
    public var helpLines: String {
        let width = min(34, (settings.map(\.variable.count).max() ?? 0) + 2)
        return settings.map { setting in
            var line = "  " + setting.variable.padding(toLength: max(width, setting.variable.count + 1), withPad: " ", startingAt: 0) + setting.summary
            if let text = setting.defaultText { line += " (\(text))" }
            if let old = setting.deprecated { line += "; \(old) (milliseconds) still read, deprecated" }
            return line
        }.joined(separator: "\n")
    }

    /// The docs' configuration table (Markdown).
    public var markdownTable: String {
        var lines = ["| variable | default | meaning |", "|---|---|---|"]
        for setting in settings {
            var meaning = setting.summary
            if let old = setting.deprecated { meaning += "; deprecated: `\(old)` (a whole number of milliseconds) is still read when this is unset" }
            lines.append("| `\(setting.variable)` | \(setting.defaultText.map { "`\($0)`" } ?? "—") | \(meaning.replacingOccurrences(of: "|", with: "\\|")) |")
        }
        return lines.joined(separator: "\n")
    }
}

extension SettingDescription {
    /// `LOG_LEVEL`, read by every service at start (`ServiceProcess`).
    public static let logLevel = SettingDescription(
        variable: "LOG_LEVEL", summary: "trace, debug, info, notice, warning, error or critical; payloads are never logged, only codes, reasons and Kafka coordinates",
        defaultText: "info")
}

/// Where a service without clients of its own (the worker, the webhooks service) serves `/health/live`,
/// `/health/ready` and `/metrics`: `<PREFIX>_OPS_HOST` and `<PREFIX>_OPS_PORT`.
public struct OpsListenerSettings: Sendable {
    public let host: Setting<String>
    public let port: Setting<Int>

    public init(prefix: String, port defaultPort: Int) {
        host = .string("\(prefix)_OPS_HOST", default: "0.0.0.0", "where `/health/live`, `/health/ready` and `/metrics` are served")
        port = .int("\(prefix)_OPS_PORT", default: defaultPort, range: 0...65535, "the ops port")
    }
}

/// What every HTTP service that faces clients reads alike (ingest, the customer API, the console): where it
/// listens and the deadlines of its connection guard, `<PREFIX>_HOST`, `<PREFIX>_PORT`, `<PREFIX>_REQUEST_TIMEOUT`
/// and `<PREFIX>_IDLE_TIMEOUT`. Described once here, so the three services mean the same by each.
public struct HTTPListenerSettings: Sendable {
    public let host: Setting<String>
    public let port: Setting<Int>
    public let requestTimeout: Setting<Duration>
    public let idleTimeout: Setting<Duration>

    /// `readsMilliseconds`: the deadlines' older `…_MS` forms are still read (services released with them).
    public init(prefix: String, port defaultPort: Int, readsMilliseconds: Bool) {
        host = .string("\(prefix)_HOST", default: "0.0.0.0", "address to listen on")
        port = .int("\(prefix)_PORT", default: defaultPort, range: 0...65535, "port to listen on (0: any free port, for tests)")
        requestTimeout = .duration(
            "\(prefix)_REQUEST_TIMEOUT", default: .seconds(15), range: .milliseconds(100) ... .seconds(600),
            deprecatedMilliseconds: readsMilliseconds ? "\(prefix)_REQUEST_TIMEOUT_MS" : nil,
            "a request's head and body must arrive within this of its first byte, else 408 (a slowloris client is cut off here)")
        idleTimeout = .duration(
            "\(prefix)_IDLE_TIMEOUT", default: .seconds(60), range: .milliseconds(100) ... .seconds(3_600),
            deprecatedMilliseconds: readsMilliseconds ? "\(prefix)_IDLE_TIMEOUT_MS" : nil, "a connection silent this long between requests is closed")
    }
}
