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
    /// Requests per second per app, by endpoint family (`APPSTORE_RATE_LIMIT_*`).
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

    /// Client-side limits that keep a run under Apple's own (documented per endpoint; sandbox allows a tenth).
    public struct RateLimits: Sendable, Hashable {
        /// Get Notification History: 50 requests/s in production.
        public var notificationHistoryPerSecond: Double
        /// Request a Test Notification and Get Test Notification Status: 1 request/s in production.
        public var testNotificationPerSecond: Double

        /// Get All Subscription Statuses and Get Transaction Info. Our default, not Apple's published figure
        /// (Apple lists per-endpoint limits in "Identifying rate limits"; a 429 is honoured whatever this says).
        public var subscriptionStatusPerSecond: Double
        /// Get Transaction History (the same caveat).
        public var transactionHistoryPerSecond: Double
        /// Send Consumption Information.
        public var consumptionPerSecond: Double
        /// The longest a call waits for its turn under these limits; a call that would wait longer is refused at
        /// once (`AppStoreServerAPIError.Kind.throttled`, with the moment it could go as `retryAfter`) instead of
        /// joining a queue that grows without bound. The customer API sets a short one (it answers 503 with
        /// `Retry-After`); the operator's tools wait longer.
        public var maximumWait: Duration = .seconds(30)

        public init(environment: Environment) {
            let scale = environment == .production ? 1.0 : 0.1
            notificationHistoryPerSecond = 50 * scale
            testNotificationPerSecond = 1 * scale
            subscriptionStatusPerSecond = 20 * scale
            transactionHistoryPerSecond = 20 * scale
            consumptionPerSecond = 10 * scale
        }

        func perSecond(_ family: AppStoreServerAPIClient.EndpointFamily) -> Double {
            switch family {
            case .notificationHistory: notificationHistoryPerSecond
            case .testNotification: testNotificationPerSecond
            case .subscriptionStatus: subscriptionStatusPerSecond
            case .transactionHistory: transactionHistoryPerSecond
            case .consumption: consumptionPerSecond
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
        "APPSTORE_KEY_ID", "APPSTORE_ISSUER_ID", "APPSTORE_PRIVATE_KEY_FILE", "APPSTORE_API_BASE_URL", "APPSTORE_RATE_LIMIT_HISTORY",
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
