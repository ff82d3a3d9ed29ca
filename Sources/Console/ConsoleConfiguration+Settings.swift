import AppStoreNotifications
import PipelineConfiguration

extension ConsoleConfiguration {
    /// The console's own settings, each described once: the parser (`fromEnvironment`), `console --help` and docs/console.md's
    /// table read these (the shared ones are `PipelineSettings`').
    enum Settings {
        static let listener = HTTPListenerSettings(prefix: "CONSOLE", port: 8090, readsMilliseconds: false)
        static let (host, port) = (listener.host, listener.port)
        static let opsPort = Setting.int("CONSOLE_OPS_PORT", default: 8091, range: 0...65535, "`/health/live`, `/health/ready` (PostgreSQL answers, schema current), `/metrics`")
        static let sessionIdle = Setting.duration("CONSOLE_SESSION_IDLE", default: .seconds(30 * 60), "a session unused this long is over (`90s`, `30m`, `8h`)")
        static let sessionMaximum = Setting.duration("CONSOLE_SESSION_MAX", default: .seconds(12 * 3600), "a session ends this long after sign-in, however busy")
        static let allowHTTP = Setting.bool(
            "CONSOLE_ALLOW_HTTP", default: false,
            "serve plain http (loopback, tests); otherwise every request must carry `X-Forwarded-Proto: https` from the TLS proxy in front, or it is refused (403 `httpsRequired`)")
        static let loginAttempts = Setting.int(
            "CONSOLE_LOGIN_ATTEMPTS", default: 10, range: 1...10_000,
            "sign-in attempts per (account, address) in the window before 429 with `Retry-After`; past them each further attempt on the account waits a growing delay (1 s, 2 s, 4 s … at most 60 s): a delay, never a lock anyone could cause")
        static let loginAttemptsPerAddress = Setting.int(
            "CONSOLE_LOGIN_ATTEMPTS_PER_ADDRESS", default: 50, range: 1...100_000, "sign-in attempts per client address in the window (several operators may share one)")
        static let loginWindow = Setting.duration("CONSOLE_LOGIN_WINDOW", default: .seconds(15 * 60), "the window of those attempts")
        static let trustForwardedFor = Setting.bool(
            "CONSOLE_TRUST_FORWARDED_FOR", default: false,
            "behind proxies: the client is the address the nearest trusted proxy saw (`X-Forwarded-For` read from the right); alone, the connection's peer is the one trusted proxy")
        static let trustedProxies = Setting<[AddressRange]>(
            SettingDescription(
                variable: "CONSOLE_TRUSTED_PROXIES", summary: "our proxies' addresses or CIDR ranges, comma-separated, skipped when `X-Forwarded-For` is read; never the header's client-written leftmost entry",
                defaultText: nil)
        ) { environment throws(ConfigurationError) in
            var ranges: [AddressRange] = []
            for text in environment.list("CONSOLE_TRUSTED_PROXIES", default: []) {
                guard let range = AddressRange(text) else {
                    throw ConfigurationError(variable: "CONSOLE_TRUSTED_PROXIES", reason: "\(UntrustedText.quoted(text, limit: 60)) is not an IP address or CIDR range")
                }
                ranges.append(range)
            }
            return ranges
        }
        static let (idleTimeout, requestTimeout) = (listener.idleTimeout, listener.requestTimeout)
        static let pageSize = Setting.int("CONSOLE_PAGE_SIZE", default: 50, range: 5...500, "timeline rows per page")
        static let traceURL = Setting<String?>(
            SettingDescription(
                variable: "CONSOLE_TRACE_URL", summary: "where a trace id links to, `{traceId}` standing for it (Jaeger: `http://localhost:16686/trace/{traceId}`); unset, the id is shown as text",
                defaultText: nil)
        ) { environment throws(ConfigurationError) in
            guard let template = environment.optionalString("CONSOLE_TRACE_URL") else { return nil }
            guard template.contains("{traceId}"), template.hasPrefix("http://") || template.hasPrefix("https://") else {
                throw ConfigurationError(variable: "CONSOLE_TRACE_URL", reason: "must be an http(s) URL containing {traceId}")
            }
            return template
        }

        static let catalog = SettingsCatalog(component: "console", settings: [
            host.description, port.description, opsPort.description, sessionIdle.description, sessionMaximum.description, allowHTTP.description,
            loginAttempts.description, loginAttemptsPerAddress.description, loginWindow.description, trustForwardedFor.description,
            trustedProxies.description, idleTimeout.description, requestTimeout.description, pageSize.description, traceURL.description,
        ])
    }
}
