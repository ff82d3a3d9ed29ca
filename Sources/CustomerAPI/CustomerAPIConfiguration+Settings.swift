import AppStoreNotifications
import PipelineConfiguration

extension CustomerAPIConfiguration {
    /// The customer API's own settings, each described once: the parser (`fromEnvironment`), `customer-api --help` and
    /// docs/customer-api.md's table read these (the shared ones are `PipelineSettings`').
    enum Settings {
        static let listener = HTTPListenerSettings(prefix: "CUSTOMER_API", port: 8082, readsMilliseconds: true)
        static let (host, port) = (listener.host, listener.port)
        static let opsPort = Setting.int("CUSTOMER_API_OPS_PORT", default: 8083, range: 0...65535, "`/health/live`, `/health/ready` (PostgreSQL with the schema current, a broker reachable) and `/metrics`, apart from the API")
        static let applyTimeout = Setting.duration(
            "CUSTOMER_API_APPLY_TIMEOUT", default: .seconds(5), range: .zero ... .seconds(120), deprecatedMilliseconds: "CUSTOMER_API_APPLY_TIMEOUT_MS",
            "a purchase waits this long for a worker to apply it before 202")
        static let maximumBodyBytes = Setting.int(
            "CUSTOMER_API_MAX_BODY_BYTES", default: 65_536, range: 1_024...16 * 1_024 * 1_024, "larger bodies are refused with 413 (a purchase is about 6 KB)")
        static let (requestTimeout, idleTimeout) = (listener.requestTimeout, listener.idleTimeout)
        static let keyCache = Setting.duration(
            "CUSTOMER_API_KEY_CACHE", default: .milliseconds(500), range: .zero ... .seconds(1), deprecatedMilliseconds: "CUSTOMER_API_KEY_CACHE_MS",
            "a key's row is reused this long; a revoked key is refused after it (at most 1s)")
        static let rateLimit = Setting.rate(
            "CUSTOMER_API_RATE_LIMIT", default: 50, range: 0...1_000_000, "requests a second per key (a token bucket), then 429 with `Retry-After`; 0: no limit")
        static let rateBurst = Setting.int("CUSTOMER_API_RATE_BURST", default: 100, range: 1...1_000_000, "requests a key may make at once before the rate applies")
        static let authAttempts = Setting.rate(
            "CUSTOMER_API_AUTH_ATTEMPTS", default: 10, range: 0...1_000_000,
            "requests a second per client address whose key is not known good (unknown, revoked, malformed, or not yet seen), taken before the key is looked up; 0: no limit")
        static let authBurst = Setting.int("CUSTOMER_API_AUTH_BURST", default: 50, range: 1...1_000_000, "and their burst")
        static let readPoolSize = Setting.int(
            "CUSTOMER_API_READ_POOL_SIZE", default: 4, range: 1...100,
            "connections of the reads' own pool on the primary (customer reads, lookups), apart from `POSTGRES_POOL_SIZE`'s (purchases, keys); each replica's pool too")
        static let orderCache = Setting.duration(
            "CUSTOMER_API_ORDER_CACHE", default: .seconds(60), range: .zero ... .seconds(3_600), deprecatedMilliseconds: "CUSTOMER_API_ORDER_CACHE_MS",
            "Apple's answer to Look Up Order ID is reused this long for the same order")
        static let appleTokenRetry = Setting.duration(
            "CUSTOMER_API_APPLE_TOKEN_RETRY", default: .seconds(30), range: .seconds(1) ... .seconds(86_400), deprecatedMilliseconds: "CUSTOMER_API_APPLE_TOKEN_RETRY_MS",
            "Set App Account Token is tried again this often, in the background, for new owners Apple has not been told yet")
        static let ownershipPolicy = Setting<OwnershipPolicy>(
            SettingDescription(variable: "OWNERSHIP_POLICY", summary: "who owns a purchase claimed by a second customer: `transfer`, `keep` or `transfer-if-inactive`", defaultText: "transfer")
        ) { environment throws(ConfigurationError) in
            guard let text = environment.optionalString("OWNERSHIP_POLICY") else { return .transfer }
            guard let policy = OwnershipPolicy(rawValue: text) else {
                throw ConfigurationError(variable: "OWNERSHIP_POLICY", reason: "\(UntrustedText.quoted(text)) is not transfer, keep or transfer-if-inactive")
            }
            return policy
        }
        static let ownershipPolicyByApp = SettingDescription(
            variable: "OWNERSHIP_POLICY_BY_APP", summary: "per app, over `OWNERSHIP_POLICY`: `bundleA=keep,bundleB=transfer-if-inactive` (each an app of `APPS`)",
            defaultText: nil)

        static let offerRules = SettingDescription(
            variable: "OFFER_RULES_FILE",
            summary: "the offers each app makes and to whom: a JSON file `{\"bundleId\": [{\"offer\", \"product\", \"kind\": \"promotional\"|\"winBack\", \"lapsedMoreThanDays\", \"neverInBillingRetryOrGrace\", \"atMostOncePerDays\", \"requiresActive\"}]}` (docs/offers.md); none: no promotional offer is decided",
            defaultText: nil)

        static let retentionRules = SettingDescription(
            variable: "RETENTION_RULES_FILE",
            summary: "Apple's real-time retention messages by subscription state: a JSON file `{\"bundleId\": [{\"status\", \"productId\", \"message\", \"alternateProduct\" or \"promotionalOffer\"}]}`, the first match answered (docs/offers.md); none: every request is answered with no message",
            defaultText: nil)

        static let catalog = SettingsCatalog(component: "customer-api", settings: [
            host.description, port.description, opsPort.description, applyTimeout.description, maximumBodyBytes.description,
            requestTimeout.description, idleTimeout.description, keyCache.description, rateLimit.description, rateBurst.description,
            authAttempts.description, authBurst.description, readPoolSize.description, orderCache.description, appleTokenRetry.description,
            ownershipPolicy.description, ownershipPolicyByApp, offerRules, retentionRules,
        ])
    }
}
