import AppStoreNotifications
import Foundation
import PipelineConfiguration
import ServiceRuntime
import SharedSettings

/// Everything the customer API is configured with. The apps, roots, database, broker and App Store Server API
/// settings are the shared `PipelineSettings`, read exactly as the worker reads them, so a purchase is verified and
/// stored under the same rules as a notification.
public struct CustomerAPIConfiguration: Sendable {
    /// `CUSTOMER_API_HOST` / `CUSTOMER_API_PORT`: where the API listens (port 0: any free port, for tests).
    public var host = "0.0.0.0"
    public var port = 8082
    /// `CUSTOMER_API_OPS_PORT`: `/health/live`, `/health/ready` and `/metrics`, apart from the API (default 8083).
    public var opsPort = 8083
    /// `CUSTOMER_API_APPLY_TIMEOUT`: how long a purchase waits for a worker to apply it before 202.
    public var applyTimeout: Duration = .seconds(5)
    /// `CUSTOMER_API_MAX_BODY_BYTES`: larger bodies are refused with 413 (a purchase is about 6 KB).
    public var maximumBodyBytes = 65_536
    /// `CUSTOMER_API_REQUEST_TIMEOUT` / `CUSTOMER_API_IDLE_TIMEOUT`: as ingest's deadlines.
    public var requestTimeout: Duration = .seconds(15)
    public var idleTimeout: Duration = .seconds(60)
    /// `CUSTOMER_API_KEY_CACHE`: how long a key's row is reused before it is read again (a revoked key is
    /// refused within this; at most 1 000).
    public var keyCache: Duration = .milliseconds(500)
    /// `CUSTOMER_API_RATE_LIMIT`: requests a second each key may make (a token bucket per key; over it, 429 with
    /// `Retry-After`). 0 turns the limit off.
    public var rateLimitPerSecond = 50.0
    /// `CUSTOMER_API_RATE_BURST`: how many requests a key may make at once before the rate applies.
    public var rateBurst = 100
    /// `CUSTOMER_API_ORDER_CACHE`: how long Apple's answer to Look Up Order ID is reused for the same order.
    public var orderCache: Duration = .seconds(60)
    /// `CUSTOMER_API_APPLE_TOKEN_RETRY`: how often Set App Account Token is tried again, in the background, for
    /// new owners Apple has not been told yet.
    public var appleTokenRetry: Duration = .seconds(30)
    /// `OWNERSHIP_POLICY`: every app's policy unless `OWNERSHIP_POLICY_BY_APP` names it.
    public var ownershipPolicy = OwnershipPolicy.transfer
    /// `OWNERSHIP_POLICY_BY_APP`: `bundleA=keep,bundleB=transfer-if-inactive`.
    public var ownershipPolicyByApp: [String: OwnershipPolicy] = [:]
    /// `CUSTOMER_API_AUTH_ATTEMPTS` / `CUSTOMER_API_AUTH_BURST`: requests a second per client address whose key is
    /// not known good (unknown, revoked, malformed, or not yet read), checked before authentication touches the
    /// database (default 10, bursts of 50; 0: no limit). A known key's requests are limited per key instead.
    public var authAttemptsPerSecond: Double = 10
    public var authAttemptsBurst = 50
    /// The settings this service shares with the worker: `APPS`, `TRUSTED_ROOTS`, `POSTGRES_URL`,
    /// `POSTGRES_POOL_SIZE`, `NOTIFICATIONS_TOPIC`, `KAFKA_*`, `APPSTORE_*`.
    public var shared: PipelineSettings

    public init(shared: PipelineSettings) {
        self.shared = shared
    }

    /// The environment variables the customer API reads (for `--help`, the docs and the deployment check).
    public static let environmentKeys = [
        "CUSTOMER_API_HOST", "CUSTOMER_API_PORT", "CUSTOMER_API_OPS_PORT", "CUSTOMER_API_APPLY_TIMEOUT", "CUSTOMER_API_APPLY_TIMEOUT_MS", "CUSTOMER_API_MAX_BODY_BYTES",
        "CUSTOMER_API_REQUEST_TIMEOUT", "CUSTOMER_API_REQUEST_TIMEOUT_MS", "CUSTOMER_API_IDLE_TIMEOUT", "CUSTOMER_API_IDLE_TIMEOUT_MS", "CUSTOMER_API_KEY_CACHE", "CUSTOMER_API_KEY_CACHE_MS", "CUSTOMER_API_RATE_LIMIT", "CUSTOMER_API_RATE_BURST",
        "CUSTOMER_API_ORDER_CACHE", "CUSTOMER_API_ORDER_CACHE_MS", "CUSTOMER_API_APPLE_TOKEN_RETRY", "CUSTOMER_API_APPLE_TOKEN_RETRY_MS", "CUSTOMER_API_AUTH_ATTEMPTS", "CUSTOMER_API_AUTH_BURST", "OWNERSHIP_POLICY", "OWNERSHIP_POLICY_BY_APP",
    ] + PipelineSettings.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> CustomerAPIConfiguration {
        let shared = try PipelineSettings.fromEnvironment(environment, defaultClientId: "appstore-customer-api")
        var configuration = CustomerAPIConfiguration(shared: shared)
        configuration.host = environment.string("CUSTOMER_API_HOST", default: configuration.host)
        configuration.port = try environment.int("CUSTOMER_API_PORT", default: configuration.port, range: 0...65535)
        configuration.opsPort = try environment.int("CUSTOMER_API_OPS_PORT", default: configuration.opsPort, range: 0...65535)
        configuration.applyTimeout = try environment.duration("CUSTOMER_API_APPLY_TIMEOUT", default: configuration.applyTimeout, range: .zero ... .seconds(120), deprecatedMilliseconds: "CUSTOMER_API_APPLY_TIMEOUT_MS")
        configuration.maximumBodyBytes = try environment.int("CUSTOMER_API_MAX_BODY_BYTES", default: configuration.maximumBodyBytes, range: 1_024...16 * 1_024 * 1_024)
        configuration.requestTimeout = try environment.duration("CUSTOMER_API_REQUEST_TIMEOUT", default: configuration.requestTimeout, range: .milliseconds(100) ... .seconds(600), deprecatedMilliseconds: "CUSTOMER_API_REQUEST_TIMEOUT_MS")
        configuration.idleTimeout = try environment.duration("CUSTOMER_API_IDLE_TIMEOUT", default: configuration.idleTimeout, range: .milliseconds(100) ... .seconds(3_600), deprecatedMilliseconds: "CUSTOMER_API_IDLE_TIMEOUT_MS")
        configuration.keyCache = try environment.duration("CUSTOMER_API_KEY_CACHE", default: configuration.keyCache, range: .zero ... .seconds(1), deprecatedMilliseconds: "CUSTOMER_API_KEY_CACHE_MS")
        if let text = environment.optionalString("CUSTOMER_API_RATE_LIMIT") {
            guard let rate = Double(text), rate >= 0, rate <= 1_000_000 else {
                throw ConfigurationError(variable: "CUSTOMER_API_RATE_LIMIT", reason: "\(UntrustedText.quoted(text, limit: 40)) is not a number of requests a second (0: no limit)")
            }
            configuration.rateLimitPerSecond = rate
        }
        configuration.rateBurst = try environment.int("CUSTOMER_API_RATE_BURST", default: configuration.rateBurst, range: 1...1_000_000)
        if let text = environment.optionalString("CUSTOMER_API_AUTH_ATTEMPTS") {
            guard let rate = Double(text), rate >= 0, rate <= 1_000_000 else {
                throw ConfigurationError(variable: "CUSTOMER_API_AUTH_ATTEMPTS", reason: "\(UntrustedText.quoted(text, limit: 40)) is not a number a second (0: no limit)")
            }
            configuration.authAttemptsPerSecond = rate
        }
        configuration.authAttemptsBurst = try environment.int("CUSTOMER_API_AUTH_BURST", default: configuration.authAttemptsBurst, range: 1...1_000_000)
        configuration.orderCache = try environment.duration("CUSTOMER_API_ORDER_CACHE", default: configuration.orderCache, range: .zero ... .seconds(3_600), deprecatedMilliseconds: "CUSTOMER_API_ORDER_CACHE_MS")
        configuration.appleTokenRetry = try environment.duration("CUSTOMER_API_APPLE_TOKEN_RETRY", default: configuration.appleTokenRetry, range: .seconds(1) ... .seconds(86_400), deprecatedMilliseconds: "CUSTOMER_API_APPLE_TOKEN_RETRY_MS")
        if let text = environment.optionalString("OWNERSHIP_POLICY") {
            guard let policy = OwnershipPolicy(rawValue: text) else {
                throw ConfigurationError(variable: "OWNERSHIP_POLICY", reason: "\(UntrustedText.quoted(text)) is not transfer, keep or transfer-if-inactive")
            }
            configuration.ownershipPolicy = policy
        }
        for pair in (environment.optionalString("OWNERSHIP_POLICY_BY_APP") ?? "").split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, let policy = OwnershipPolicy(rawValue: parts[1]) else {
                throw ConfigurationError(variable: "OWNERSHIP_POLICY_BY_APP", reason: "\(UntrustedText.quoted(String(pair))) is not bundleId=transfer|keep|transfer-if-inactive")
            }
            guard shared.apps.contains(where: { $0.bundleId == parts[0] }) else {
                throw ConfigurationError(variable: "OWNERSHIP_POLICY_BY_APP", reason: "\(UntrustedText.quoted(parts[0])) is not an app of APPS")
            }
            configuration.ownershipPolicyByApp[parts[0]] = policy
        }
        return configuration
    }

    /// The ownership policy of `bundleId`.
    public func ownershipPolicy(for bundleId: String) -> OwnershipPolicy {
        ownershipPolicyByApp[bundleId] ?? ownershipPolicy
    }

    /// `customer-api --help`.
    public static let help = """
        customer-api: the app backend's API (purchases at once, customer lookups). Configured by the environment:
          CUSTOMER_API_HOST, CUSTOMER_API_PORT      where the API listens (0.0.0.0, 8082)
          CUSTOMER_API_OPS_PORT                     /health/live, /health/ready, /metrics (8083)
          CUSTOMER_API_APPLY_TIMEOUT                a purchase waits this long for a worker before 202 (5s)
          CUSTOMER_API_MAX_BODY_BYTES               larger bodies get 413 (65536)
          CUSTOMER_API_REQUEST_TIMEOUT              a request's head and body must arrive within this, or 408 (15s)
          CUSTOMER_API_IDLE_TIMEOUT                 an idle connection is closed after this (1m)
          CUSTOMER_API_KEY_CACHE                    a key's row is reused this long; a revoked key is refused after it (500ms, at most 1s)
          CUSTOMER_API_RATE_LIMIT                   requests a second per key, then 429 + Retry-After (50; 0: no limit)
          CUSTOMER_API_RATE_BURST                   requests a key may make at once before the rate applies (100)
          CUSTOMER_API_AUTH_ATTEMPTS                requests a second per client address with a key not known good, before the database (10; 0: no limit)
          CUSTOMER_API_AUTH_BURST                   and their burst (50)
          CUSTOMER_API_ORDER_CACHE                  Apple's Look Up Order ID answer is reused this long (1m)
          CUSTOMER_API_APPLE_TOKEN_RETRY            Set App Account Token is retried in the background this often (30s)
          OWNERSHIP_POLICY                          transfer | keep | transfer-if-inactive (transfer)
          OWNERSHIP_POLICY_BY_APP                   per app: bundleA=keep,bundleB=transfer-if-inactive
          APPS, TRUSTED_ROOTS, POSTGRES_URL, POSTGRES_POOL_SIZE, NOTIFICATIONS_TOPIC, KAFKA_*, APPSTORE_*
                                                    read exactly as the worker reads them
          LOG_LEVEL                                 trace, debug, info (default), notice, warning, error, critical
        Keys: pipelinectl api-keys create --name N [--bundle-id B]... [--scope read|write]. Spec: docs/customer-api.yaml.
        """
}
