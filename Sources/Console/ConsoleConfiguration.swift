import Foundation
import PipelineConfiguration
import SharedSettings

/// Everything the console is configured with. It reads PostgreSQL and, for re-drives, writes to the notifications
/// topic; the shared settings are the worker's (`PipelineSettings`).
public struct ConsoleConfiguration: Sendable {
    /// `CONSOLE_HOST` / `CONSOLE_PORT`: where the pages are served (port 0: any free port, for tests).
    public var host = "0.0.0.0"
    public var port = 8090
    /// `CONSOLE_OPS_PORT`: `/health/live`, `/health/ready` and `/metrics`, apart from the pages (default 8091).
    public var opsPort = 8091
    /// `CONSOLE_SESSION_IDLE`: a session unused this long is over (default 30m; `90s`, `30m`, `8h`).
    public var sessionIdle: Duration = .seconds(30 * 60)
    /// `CONSOLE_ALLOW_HTTP`: serve plain http (loopback, tests). Otherwise a request must have come through TLS
    /// (`X-Forwarded-Proto: https` from the proxy in front), or it is refused.
    public var allowHTTP = false
    /// `CONSOLE_LOGIN_ATTEMPTS`: failed logins allowed per account in `CONSOLE_LOGIN_WINDOW` before 429 (10; the
    /// window 15m); `CONSOLE_LOGIN_ATTEMPTS_PER_ADDRESS`: per client address (50: several operators may share one).
    public var loginAttempts = 10
    public var loginAttemptsPerAddress = 50
    /// `CONSOLE_TRUST_FORWARDED_FOR`: behind one proxy (the connection's peer), the client is the address that proxy
    /// saw, `X-Forwarded-For`'s last entry (`ClientAddress`); set it only behind a proxy that appends to that header.
    public var trustForwardedFor = false
    /// `CONSOLE_TRUSTED_PROXIES`: our proxies' addresses or CIDR ranges (comma-separated). The client is the address
    /// the nearest trusted proxy saw (`X-Forwarded-For` read from the right), never the header's client-written
    /// leftmost entry. Empty with `CONSOLE_TRUST_FORWARDED_FOR`: the connection's peer is the one trusted proxy.
    var trustedProxies: [AddressRange] = []
    /// `CONSOLE_SESSION_MAX`: a session ends this long after sign-in, however busy (default 12h).
    public var sessionMaximum: Duration = .seconds(12 * 3600)
    /// `CONSOLE_IDLE_TIMEOUT` / `CONSOLE_REQUEST_TIMEOUT`: an idle connection is closed after the first (60s); a
    /// request's head and body must arrive within the second (15s), or 408 (the guard ingest and the customer API use).
    public var idleTimeout: Duration = .seconds(60)
    public var requestTimeout: Duration = .seconds(15)
    public var loginWindow: Duration = .seconds(15 * 60)
    /// `CONSOLE_PAGE_SIZE`: timeline rows per page (50).
    public var pageSize = 50
    /// `CONSOLE_TRACE_URL`: where a trace id links to, `{traceId}` standing for it (Jaeger:
    /// `http://localhost:16686/trace/{traceId}`); unset, the id is shown as text.
    public var traceURLTemplate: String?
    public var shared: PipelineSettings
    /// `POSTGRES_READ_URL` and companions: the pages' replicas (docs/scale.md); none by default.
    public var reads = ReadReplicaSettings()

    public init(shared: PipelineSettings) {
        self.shared = shared
    }

    /// The console's own settings, for `--help`, the docs and `pipelinectl settings console`.
    public static var catalog: SettingsCatalog { Settings.catalog }

    public static let environmentKeys = Settings.catalog.environmentKeys + PipelineSettings.environmentKeys + ReadReplicaSettings.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> ConsoleConfiguration {
        var configuration = ConsoleConfiguration(shared: try PipelineSettings.fromEnvironment(environment, defaultClientId: "appstore-console"))
        configuration.host = try Settings.host.read(environment)
        configuration.port = try Settings.port.read(environment)
        configuration.opsPort = try Settings.opsPort.read(environment)
        configuration.sessionIdle = try Settings.sessionIdle.read(environment)
        configuration.sessionMaximum = try Settings.sessionMaximum.read(environment)
        configuration.allowHTTP = try Settings.allowHTTP.read(environment)
        configuration.loginAttempts = try Settings.loginAttempts.read(environment)
        configuration.loginAttemptsPerAddress = try Settings.loginAttemptsPerAddress.read(environment)
        configuration.loginWindow = try Settings.loginWindow.read(environment)
        configuration.trustForwardedFor = try Settings.trustForwardedFor.read(environment)
        configuration.trustedProxies = try Settings.trustedProxies.read(environment)
        configuration.idleTimeout = try Settings.idleTimeout.read(environment)
        configuration.requestTimeout = try Settings.requestTimeout.read(environment)
        configuration.pageSize = try Settings.pageSize.read(environment)
        configuration.traceURLTemplate = try Settings.traceURL.read(environment)
        configuration.reads = try ReadReplicaSettings.fromEnvironment(environment)
        return configuration
    }

    /// `console --help`.
    public static let help = """
        console: the operator console (a customer's whole story, dead letters, actions). Configured by the environment
        (durations as 500ms, 10s, 5m). Its own settings:
        \(Settings.catalog.helpLines)
        Shared with the worker and read exactly as it reads them: APPS, TRUSTED_ROOTS, POSTGRES_URL, POSTGRES_POOL_SIZE,
        NOTIFICATIONS_TOPIC, KAFKA_*, APPSTORE_* (the App Store Server API key enables "Reconcile with Apple now").
        The pages' reads from replicas (docs/scale.md):
        \(ReadReplicaSettings.catalog.helpLines)
        LOG_LEVEL: trace, debug, info (default), notice, warning, error, critical.
        Operators: pipelinectl operators add --email E --role viewer|support|admin (prints a one-time password). docs/console.md.
        """
}
