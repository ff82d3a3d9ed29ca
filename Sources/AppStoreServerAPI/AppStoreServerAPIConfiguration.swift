import AppStoreNotifications
import Crypto
import Foundation

/// Where and as whom the App Store Server API is called. One key (made under Users and Access → Integrations →
/// In-App Purchase in App Store Connect) serves every app of a team; the bundle id is per request.
public struct AppStoreServerAPIConfiguration: Sendable, CustomStringConvertible {
    /// `APPSTORE_KEY_ID`: the key's id (the JWT header's `kid`).
    public var keyId: String
    /// `APPSTORE_ISSUER_ID`: the team's issuer id (the JWT's `iss`).
    public var issuerId: String
    /// `APPSTORE_PRIVATE_KEY_FILE`: the `.p8` key. A secret: never printed, never in an error message.
    public var signingKey: P256.Signing.PrivateKey
    /// Production or Sandbox: the base URL and the rate limits follow from it.
    public var environment: Environment
    /// `APPSTORE_API_BASE_URL`: overrides Apple's URL for the environment (tests, a proxy).
    public var baseURL: String
    /// Requests per second per app, by endpoint class (`APPSTORE_API_RATE`, `APPSTORE_RATE_LIMIT_*`).
    public var rateLimits: RateLimits
    /// How a failed call is retried.
    public var retryPolicy: RetryPolicy
    /// One request's deadline, connection to last byte.
    public var requestTimeout: Duration = .seconds(30)

    public init(keyId: String, issuerId: String, signingKey: P256.Signing.PrivateKey, environment: Environment, baseURL: String? = nil) {
        self.keyId = keyId
        self.issuerId = issuerId
        self.signingKey = signingKey
        self.environment = environment
        self.baseURL = baseURL ?? Self.appleBaseURL(environment)
        self.rateLimits = RateLimits(environment: environment)
        self.retryPolicy = RetryPolicy()
    }

    /// Apple's base URL for `environment`.
    public static func appleBaseURL(_ environment: Environment) -> String {
        environment == .production ? "https://api.storekit.apple.com" : "https://api.storekit-sandbox.apple.com"
    }

    /// Never the key: only where it points and whose it is.
    public var description: String { "App Store Server API \(environment.rawValue) at \(baseURL), key id \(keyId), issuer \(issuerId)" }

    /// The budget per app and endpoint class that every process together keeps within (the shared budget) and
    /// Apple's own limits (documented per endpoint in "Identifying rate limits"; sandbox allows a tenth). A 429 or 503
    /// with `Retry-After` pauses the class whatever these say.
    public struct RateLimits: Sendable, Hashable {
        /// Get Notification History: 50 requests/s in production.
        public var notificationHistoryPerSecond: Double
        /// Request a Test Notification and Get Test Notification Status: 1 request/s in production.
        public var testNotificationPerSecond: Double
        /// Get All Subscription Statuses, Get Transaction Info, Get App Transaction Info: 50 requests/s.
        public var subscriptionStatusPerSecond: Double
        /// Get Transaction History: 50 requests/s.
        public var transactionHistoryPerSecond: Double
        /// Look Up Order ID and Get Refund History: fewer (10 requests/s, our default).
        public var lookupPerSecond: Double
        /// Send Consumption Information, Set App Account Token, renewal-date extensions.
        public var consumptionPerSecond: Double
        /// The Retention Messaging API (Apple allows 1 request/s for most of its endpoints, per app).
        public var retentionMessagingPerSecond: Double
        /// The longest a call waits for its turn under these limits; a call that would wait longer is refused at
        /// once (`AppStoreServerAPIError.Kind.throttled`, with the moment it could go as `retryAfter`) instead of
        /// joining a queue that grows without bound. The customer API sets a short one (it answers 503 with
        /// `Retry-After`); the operator's tools wait longer.
        public var maximumWait: Duration = .seconds(30)

        public init(environment: Environment) {
            let scale = environment == .production ? 1.0 : 0.1
            notificationHistoryPerSecond = 50 * scale
            testNotificationPerSecond = 1 * scale
            subscriptionStatusPerSecond = 50 * scale
            transactionHistoryPerSecond = 50 * scale
            lookupPerSecond = 10 * scale
            consumptionPerSecond = 10 * scale
            retentionMessagingPerSecond = 1
        }

        public func perSecond(_ family: AppStoreServerAPIClient.EndpointFamily) -> Double {
            switch family {
            case .lookup: lookupPerSecond
            case .retentionMessaging: retentionMessagingPerSecond
            case .notificationHistory: notificationHistoryPerSecond
            case .testNotification: testNotificationPerSecond
            case .subscriptionStatus: subscriptionStatusPerSecond
            case .transactionHistory: transactionHistoryPerSecond
            case .consumption: consumptionPerSecond
            }
        }

        public mutating func set(_ family: AppStoreServerAPIClient.EndpointFamily, _ perSecond: Double) {
            switch family {
            case .lookup: lookupPerSecond = perSecond
            case .retentionMessaging: retentionMessagingPerSecond = perSecond
            case .notificationHistory: notificationHistoryPerSecond = perSecond
            case .testNotification: testNotificationPerSecond = perSecond
            case .subscriptionStatus: subscriptionStatusPerSecond = perSecond
            case .transactionHistory: transactionHistoryPerSecond = perSecond
            case .consumption: consumptionPerSecond = perSecond
            }
        }

        /// The names `APPSTORE_API_RATE` takes, by class.
        public static let classNames: [String: AppStoreServerAPIClient.EndpointFamily] = [
            "history": .notificationHistory, "test-notification": .testNotification, "statuses": .subscriptionStatus,
            "transaction-history": .transactionHistory, "lookup": .lookup, "consumption": .consumption, "retention-messaging": .retentionMessaging,
        ]

        /// `APPSTORE_API_RATE`: one number for every class (`50`), or `class=rate` pairs (`statuses=50,lookup=10`)
        /// with the classes of `classNames`; classes not named keep their rate.
        public mutating func apply(_ text: String) throws(AppStoreConfigurationError) {
            func number(_ value: Substring) throws(AppStoreConfigurationError) -> Double {
                guard let rate = Double(value.trimmingCharacters(in: .whitespaces)), rate > 0, rate <= 10_000 else {
                    throw AppStoreConfigurationError(variable: "APPSTORE_API_RATE", reason: "takes requests per second above 0 and at most 10000, got \(UntrustedText.quoted(String(value)))")
                }
                return rate
            }
            if !text.contains("=") {
                let rate = try number(Substring(text))
                for family in AppStoreServerAPIClient.EndpointFamily.allCases { set(family, rate) }
                return
            }
            for pair in text.split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                let name = parts.first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
                guard parts.count == 2, let family = Self.classNames[name] else {
                    throw AppStoreConfigurationError(
                        variable: "APPSTORE_API_RATE",
                        reason: "names classes as class=rate with class one of \(Self.classNames.keys.sorted().joined(separator: ", ")); got \(UntrustedText.quoted(String(pair)))")
                }
                set(family, try number(parts[1]))
            }
        }
    }

    /// Exponential backoff with full jitter, honouring Apple's `Retry-After`, bounded in attempts and in time.
    public struct RetryPolicy: Sendable, Hashable {
        /// Attempts per call, the first included.
        public var maximumAttempts = 8
        /// The first backoff; doubled per attempt up to `maximumBackoff`.
        public var initialBackoff: Duration = .milliseconds(500)
        public var maximumBackoff: Duration = .seconds(30)
        /// The longest one call may take, retries and waits included; a `Retry-After` beyond it fails the call.
        public var maximumTotal: Duration = .seconds(300)

        public init() {}
    }

    /// The variables `fromEnvironment` reads (every process that calls Apple: the worker's healer, the customer
    /// API, pipelinectl's pull commands).
    public static let environmentKeys = [
        "APPSTORE_KEY_ID", "APPSTORE_ISSUER_ID", "APPSTORE_PRIVATE_KEY_FILE", "APPSTORE_API_BASE_URL", "APPSTORE_API_RATE", "APPSTORE_RATE_LIMIT_HISTORY",
        "APPSTORE_RATE_LIMIT_TEST_NOTIFICATION", "APPSTORE_RATE_LIMIT_STATUSES", "APPSTORE_RATE_LIMIT_TRANSACTION_HISTORY", "APPSTORE_RATE_LIMIT_CONSUMPTION",
        "APPSTORE_MAX_ATTEMPTS",
    ]

    /// Reads the `APPSTORE_*` variables. Every error names the variable and never quotes the key.
    public static func fromEnvironment(_ variables: [String: String], environment: Environment) throws(AppStoreConfigurationError) -> AppStoreServerAPIConfiguration {
        func required(_ name: String) throws(AppStoreConfigurationError) -> String {
            guard let value = variables[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else {
                throw AppStoreConfigurationError(variable: name, reason: "is not set; the App Store Server API needs it")
            }
            return value
        }
        guard environment == .production || environment == .sandbox else {
            throw AppStoreConfigurationError(variable: "--environment", reason: "must be Production or Sandbox (the App Store Server API serves no other)")
        }
        let keyId = try required("APPSTORE_KEY_ID")
        let issuerId = try required("APPSTORE_ISSUER_ID")
        let keyFile = try required("APPSTORE_PRIVATE_KEY_FILE")
        let key = try loadSigningKey(path: keyFile, variable: "APPSTORE_PRIVATE_KEY_FILE")
        var baseURL: String?
        if let override = variables["APPSTORE_API_BASE_URL"], !override.isEmpty {
            guard let url = URL(string: override), let scheme = url.scheme, scheme == "https" || scheme == "http", url.host != nil else {
                throw AppStoreConfigurationError(variable: "APPSTORE_API_BASE_URL", reason: "is not an http(s) URL: \(UntrustedText.quoted(override))")
            }
            baseURL = override.hasSuffix("/") ? String(override.dropLast()) : override
        }
        var configuration = AppStoreServerAPIConfiguration(keyId: keyId, issuerId: issuerId, signingKey: key, environment: environment, baseURL: baseURL)
        func rate(_ name: String, _ current: Double) throws(AppStoreConfigurationError) -> Double {
            guard let text = variables[name], !text.isEmpty else { return current }
            guard let value = Double(text), value > 0, value <= 10_000 else {
                throw AppStoreConfigurationError(variable: name, reason: "must be a number of requests per second above 0, got \(UntrustedText.quoted(text))")
            }
            return value
        }
        if let text = variables["APPSTORE_API_RATE"], !text.isEmpty { try configuration.rateLimits.apply(text) }
        configuration.rateLimits.notificationHistoryPerSecond = try rate("APPSTORE_RATE_LIMIT_HISTORY", configuration.rateLimits.notificationHistoryPerSecond)
        configuration.rateLimits.testNotificationPerSecond = try rate("APPSTORE_RATE_LIMIT_TEST_NOTIFICATION", configuration.rateLimits.testNotificationPerSecond)
        configuration.rateLimits.subscriptionStatusPerSecond = try rate("APPSTORE_RATE_LIMIT_STATUSES", configuration.rateLimits.subscriptionStatusPerSecond)
        configuration.rateLimits.transactionHistoryPerSecond = try rate("APPSTORE_RATE_LIMIT_TRANSACTION_HISTORY", configuration.rateLimits.transactionHistoryPerSecond)
        configuration.rateLimits.consumptionPerSecond = try rate("APPSTORE_RATE_LIMIT_CONSUMPTION", configuration.rateLimits.consumptionPerSecond)
        if let text = variables["APPSTORE_MAX_ATTEMPTS"], !text.isEmpty {
            guard let attempts = Int(text), (1...100).contains(attempts) else {
                throw AppStoreConfigurationError(variable: "APPSTORE_MAX_ATTEMPTS", reason: "must be 1…100, got \(UntrustedText.quoted(text))")
            }
            configuration.retryPolicy.maximumAttempts = attempts
        }
        return configuration
    }

    /// The `.p8` file App Store Connect hands out: a PKCS#8 PEM holding a P-256 key.
    public static func loadSigningKey(path: String, variable: String) throws(AppStoreConfigurationError) -> P256.Signing.PrivateKey {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw AppStoreConfigurationError(variable: variable, reason: "names a file that cannot be read (\(UntrustedText.quoted(path))): check the path and the secret mount")
        }
        guard text.contains("-----BEGIN") else {
            throw AppStoreConfigurationError(variable: variable, reason: "file \(UntrustedText.quoted(path)) is not a PEM (no -----BEGIN line): use the .p8 file from App Store Connect as downloaded")
        }
        do {
            return try P256.Signing.PrivateKey(pemRepresentation: text)
        } catch {
            // The parser's own message is not repeated: it could quote key material.
            throw AppStoreConfigurationError(
                variable: variable, reason: "file \(UntrustedText.quoted(path)) holds no P-256 private key (App Store Server API keys are ES256, PKCS#8 PEM)")
        }
    }
}

/// A setting that cannot work, named so an operator can fix it.
public struct AppStoreConfigurationError: Error, Sendable, CustomStringConvertible {
    public var variable: String
    public var reason: String
    public init(variable: String, reason: String) {
        self.variable = variable
        self.reason = reason
    }
    public var description: String { "\(variable) \(reason)" }
}
