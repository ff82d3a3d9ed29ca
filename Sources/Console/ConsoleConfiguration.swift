import AppStoreNotifications
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

    public init(shared: PipelineSettings) {
        self.shared = shared
    }

    public static let environmentKeys = [
        "CONSOLE_HOST", "CONSOLE_PORT", "CONSOLE_OPS_PORT", "CONSOLE_SESSION_IDLE", "CONSOLE_ALLOW_HTTP", "CONSOLE_LOGIN_ATTEMPTS", "CONSOLE_LOGIN_ATTEMPTS_PER_ADDRESS", "CONSOLE_LOGIN_WINDOW",
        "CONSOLE_TRUST_FORWARDED_FOR", "CONSOLE_TRUSTED_PROXIES", "CONSOLE_SESSION_MAX", "CONSOLE_IDLE_TIMEOUT", "CONSOLE_REQUEST_TIMEOUT",
        "CONSOLE_PAGE_SIZE", "CONSOLE_TRACE_URL",
    ] + PipelineSettings.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> ConsoleConfiguration {
        var configuration = ConsoleConfiguration(shared: try PipelineSettings.fromEnvironment(environment, defaultClientId: "appstore-console"))
        configuration.host = environment.string("CONSOLE_HOST", default: configuration.host)
        configuration.port = try environment.int("CONSOLE_PORT", default: configuration.port, range: 0...65535)
        configuration.opsPort = try environment.int("CONSOLE_OPS_PORT", default: configuration.opsPort, range: 0...65535)
        configuration.sessionIdle = try environment.duration("CONSOLE_SESSION_IDLE", default: configuration.sessionIdle)
        configuration.allowHTTP = try environment.bool("CONSOLE_ALLOW_HTTP", default: false)
        configuration.loginAttempts = try environment.int("CONSOLE_LOGIN_ATTEMPTS", default: configuration.loginAttempts, range: 1...10_000)
        configuration.loginAttemptsPerAddress = try environment.int("CONSOLE_LOGIN_ATTEMPTS_PER_ADDRESS", default: configuration.loginAttemptsPerAddress, range: 1...100_000)
        configuration.trustForwardedFor = try environment.bool("CONSOLE_TRUST_FORWARDED_FOR", default: false)
        configuration.loginWindow = try environment.duration("CONSOLE_LOGIN_WINDOW", default: configuration.loginWindow)
        for text in environment.list("CONSOLE_TRUSTED_PROXIES", default: []) {
            guard let range = AddressRange(text) else {
                throw ConfigurationError(variable: "CONSOLE_TRUSTED_PROXIES", reason: "\(UntrustedText.quoted(text, limit: 60)) is not an IP address or CIDR range")
            }
            configuration.trustedProxies.append(range)
        }
        configuration.sessionMaximum = try environment.duration("CONSOLE_SESSION_MAX", default: configuration.sessionMaximum)
        configuration.idleTimeout = try environment.duration("CONSOLE_IDLE_TIMEOUT", default: configuration.idleTimeout)
        configuration.requestTimeout = try environment.duration("CONSOLE_REQUEST_TIMEOUT", default: configuration.requestTimeout)
        configuration.pageSize = try environment.int("CONSOLE_PAGE_SIZE", default: configuration.pageSize, range: 5...500)
        if let template = environment.optionalString("CONSOLE_TRACE_URL") {
            guard template.contains("{traceId}"), template.hasPrefix("http://") || template.hasPrefix("https://") else {
                throw ConfigurationError(variable: "CONSOLE_TRACE_URL", reason: "must be an http(s) URL containing {traceId}")
            }
            configuration.traceURLTemplate = template
        }
        return configuration
    }

    /// `console --help`.
    public static let help = """
        console: the operator console (a customer's whole story, dead letters, actions). Configured by the environment:
          CONSOLE_HOST, CONSOLE_PORT        where the pages are served (0.0.0.0, 8090)
          CONSOLE_OPS_PORT                  /health/live, /health/ready, /metrics (8091)
          CONSOLE_SESSION_IDLE              a session unused this long ends (30m)
          CONSOLE_ALLOW_HTTP                true: serve plain http (loopback); otherwise only behind TLS (X-Forwarded-Proto: https)
          CONSOLE_LOGIN_ATTEMPTS            failed logins per account in the window before 429 (10)
          CONSOLE_LOGIN_ATTEMPTS_PER_ADDRESS  and per client address (50)
          CONSOLE_TRUST_FORWARDED_FOR       true: behind one proxy, the client is the address it saw (X-Forwarded-For's last)
          CONSOLE_TRUSTED_PROXIES           our proxies (addresses, CIDR ranges): the client is the address the nearest of them saw
          CONSOLE_SESSION_MAX               a session ends this long after sign-in (12h)
          CONSOLE_IDLE_TIMEOUT, CONSOLE_REQUEST_TIMEOUT   idle connections closed (60s); a request's head and body within (15s) or 408
          CONSOLE_LOGIN_WINDOW              that window (15m)
          CONSOLE_PAGE_SIZE                 timeline rows per page (50)
          CONSOLE_TRACE_URL                 a trace id's link, {traceId} standing for it (e.g. http://localhost:16686/trace/{traceId})
          APPS, TRUSTED_ROOTS, POSTGRES_URL, POSTGRES_POOL_SIZE, NOTIFICATIONS_TOPIC, KAFKA_*
                                            read exactly as the worker reads them
          LOG_LEVEL                         trace, debug, info (default), notice, warning, error, critical
        Operators: pipelinectl operators add --email E --role viewer|support|admin (prints a one-time password). docs/console.md.
        """
}
