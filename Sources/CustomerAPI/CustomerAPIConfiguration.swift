import AppStoreOffers
import AppStoreNotifications
import Foundation
import PipelineConfiguration
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
    /// `CUSTOMER_API_READ_POOL_SIZE`: the connections of the reads' own pool (the customer read, lookups), apart from
    /// the `POSTGRES_POOL_SIZE` pool that purchases, keys and the purchase path's polling use: an app launch's read
    /// never queues behind a burst of purchases. Each replica of `POSTGRES_READ_URL` gets a pool of this size too.
    public var readPoolSize = 4
    /// The settings this service shares with the worker: `APPS`, `TRUSTED_ROOTS`, `POSTGRES_URL`,
    /// `POSTGRES_POOL_SIZE`, `NOTIFICATIONS_TOPIC`, `KAFKA_*`, `APPSTORE_*`.
    public var shared: PipelineSettings
    /// `POSTGRES_READ_URL` and companions: the reads' replicas (docs/scale.md); none by default.
    public var reads = ReadReplicaSettings()
    /// `OFFER_RULES_FILE`: the promotional and win-back offers each app makes, in the order they are chosen.
    public var offerRules: [String: [OfferRule]] = [:]
    /// `RETENTION_RULES_FILE`: each app's real-time retention rules, in the order they are tried.
    public var retentionRules: [String: [RetentionRule]] = [:]

    public init(shared: PipelineSettings) {
        self.shared = shared
    }

    /// The customer API's own settings, for `--help`, the docs and `pipelinectl settings customer-api`.
    public static var catalog: SettingsCatalog { Settings.catalog }

    /// The environment variables the customer API reads (for `--help`, the docs and the deployment check).
    public static let environmentKeys = Settings.catalog.environmentKeys + PipelineSettings.environmentKeys + ReadReplicaSettings.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> CustomerAPIConfiguration {
        let shared = try PipelineSettings.fromEnvironment(environment, defaultClientId: "appstore-customer-api")
        var configuration = CustomerAPIConfiguration(shared: shared)
        configuration.host = try Settings.host.read(environment)
        configuration.port = try Settings.port.read(environment)
        configuration.opsPort = try Settings.opsPort.read(environment)
        configuration.applyTimeout = try Settings.applyTimeout.read(environment)
        configuration.maximumBodyBytes = try Settings.maximumBodyBytes.read(environment)
        configuration.requestTimeout = try Settings.requestTimeout.read(environment)
        configuration.idleTimeout = try Settings.idleTimeout.read(environment)
        configuration.keyCache = try Settings.keyCache.read(environment)
        configuration.rateLimitPerSecond = try Settings.rateLimit.read(environment)
        configuration.rateBurst = try Settings.rateBurst.read(environment)
        configuration.authAttemptsPerSecond = try Settings.authAttempts.read(environment)
        configuration.authAttemptsBurst = try Settings.authBurst.read(environment)
        configuration.readPoolSize = try Settings.readPoolSize.read(environment)
        configuration.orderCache = try Settings.orderCache.read(environment)
        configuration.appleTokenRetry = try Settings.appleTokenRetry.read(environment)
        configuration.ownershipPolicy = try Settings.ownershipPolicy.read(environment)
        configuration.reads = try ReadReplicaSettings.fromEnvironment(environment)
        let byApp = Settings.ownershipPolicyByApp.variable
        for pair in (environment.optionalString(byApp) ?? "").split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, let policy = OwnershipPolicy(rawValue: parts[1]) else {
                throw ConfigurationError(variable: byApp, reason: "\(UntrustedText.quoted(String(pair))) is not bundleId=transfer|keep|transfer-if-inactive")
            }
            guard shared.apps.contains(where: { $0.bundleId == parts[0] }) else {
                throw ConfigurationError(variable: byApp, reason: "\(UntrustedText.quoted(parts[0])) is not an app of APPS")
            }
            configuration.ownershipPolicyByApp[parts[0]] = policy
        }
        if let path = environment.optionalString(Settings.offerRules.variable) {
            configuration.offerRules = try Self.readRules(path: path, variable: Settings.offerRules.variable, apps: Set(shared.apps.compactMap(\.bundleId))) {
                (rule: OfferRule) in rule.offer.isEmpty || rule.product.isEmpty ? "has an empty offer or product" : nil
            }
        }
        if let path = environment.optionalString(Settings.retentionRules.variable) {
            configuration.retentionRules = try Self.readRules(path: path, variable: Settings.retentionRules.variable, apps: Set(shared.apps.compactMap(\.bundleId))) {
                (rule: RetentionRule) in rule.problem
            }
        }
        return configuration
    }

    /// A rules file (`OFFER_RULES_FILE`, `RETENTION_RULES_FILE`): `{"bundleId": [rules]}`, each app one of `APPS`,
    /// each rule without a `problem`; every error names the variable.
    static func readRules<Rule: Decodable>(
        path: String, variable: String, apps: Set<String>, problem: (Rule) -> String?
    ) throws(ConfigurationError) -> [String: [Rule]] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(variable: variable, reason: "names a file that cannot be read (\(UntrustedText.quoted(path)))")
        }
        let rules: [String: [Rule]]
        do {
            rules = try JSONDecoder().decode([String: [Rule]].self, from: data)
        } catch {
            throw ConfigurationError(variable: variable, reason: "is not {\"bundleId\": [rules]} as docs/offers.md shows: \(error)")
        }
        for (bundleId, list) in rules {
            guard apps.contains(bundleId) else { throw ConfigurationError(variable: variable, reason: "\(UntrustedText.quoted(bundleId)) is not an app of APPS") }
            for (index, rule) in list.enumerated() {
                if let reason = problem(rule) { throw ConfigurationError(variable: variable, reason: "rule \(index + 1) of \(bundleId) \(reason)") }
            }
        }
        return rules
    }

    /// The ownership policy of `bundleId`.
    public func ownershipPolicy(for bundleId: String) -> OwnershipPolicy {
        ownershipPolicyByApp[bundleId] ?? ownershipPolicy
    }

    /// `customer-api --help`.
    public static let help = """
        customer-api: the app backend's API (purchases at once, customer lookups). Configured by the environment
        (durations as 500ms, 10s, 5m). Its own settings:
        \(Settings.catalog.helpLines)
        Shared with the worker and read exactly as it reads them: APPS, TRUSTED_ROOTS, POSTGRES_URL, POSTGRES_POOL_SIZE,
        NOTIFICATIONS_TOPIC, KAFKA_*, APPSTORE_*. Reads from replicas (docs/scale.md):
        \(ReadReplicaSettings.catalog.helpLines)
        LOG_LEVEL: trace, debug, info (default), notice, warning, error, critical.
        Keys: pipelinectl api-keys create --name N [--bundle-id B]... [--scope read|write]. Spec: docs/customer-api.yaml.
        """
}
