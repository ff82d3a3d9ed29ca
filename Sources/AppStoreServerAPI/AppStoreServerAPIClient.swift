import AppStoreNotifications
import AppStoreServerAPIModels
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Tracing

/// The App Store Server API over AsyncHTTPClient: JWT auth, Apple's errors as `AppStoreServerAPIError`, retries
/// with backoff and jitter that honour `Retry-After`, and a budget per (app, environment, endpoint class) shared with
/// every other process when it is the shared one (docs/appstore-budget.md). Every call has a deadline.
public final class AppStoreServerAPIClient: Sendable {
    /// Endpoint classes, each with its own rate limit (`APPSTORE_API_RATE`).
    public enum EndpointFamily: String, Sendable, CaseIterable {
        /// Get Notification History.
        case notificationHistory
        /// Request a Test Notification, Get Test Notification Status (each limited apart).
        case testNotification
        /// Get All Subscription Statuses, Get Transaction Info, Get App Transaction Info, mass extension status.
        case subscriptionStatus
        /// Get Transaction History.
        case transactionHistory
        /// Look Up Order ID and Get Refund History: Apple allows fewer.
        case lookup
        /// Send Consumption Information, Set App Account Token, renewal-date extensions.
        case consumption
        /// The Retention Messaging API: images, messages, default messages, the real-time URL.
        case retentionMessaging
    }

    public let configuration: AppStoreServerAPIConfiguration
    let signer: AppStoreTokenSigner
    let httpClient: HTTPClient
    /// Where each call takes its turn: this process's own, or the one every process shares.
    public let budget: any AppStoreRequestBudget
    /// The lane of calls made outside `AppStoreAPILane.$current.withValue` (the customer API's: `.purchase`).
    public let defaultLane: AppStoreAPILane
    let logger: Logger
    /// Told about every wait before a retry (the CLI shows it as progress).
    let onRetry: @Sendable (AppStoreServerAPIError, Duration) -> Void
    /// The largest answer read; Apple's pages are far smaller.
    static let maximumResponseBytes = 32 * 1024 * 1024

    public init(
        configuration: AppStoreServerAPIConfiguration, logger: Logger, budget: (any AppStoreRequestBudget)? = nil, defaultLane: AppStoreAPILane = .console,
        onRetry: @escaping @Sendable (AppStoreServerAPIError, Duration) -> Void = { _, _ in }
    ) {
        self.configuration = configuration
        self.budget = budget ?? LocalRequestBudget()
        self.defaultLane = defaultLane
        self.signer = AppStoreTokenSigner(keyId: configuration.keyId, issuerId: configuration.issuerId, signingKey: configuration.signingKey)
        var httpConfiguration = HTTPClient.Configuration()
        httpConfiguration.timeout = .init(connect: .seconds(10), read: .seconds(30))
        httpConfiguration.redirectConfiguration = .disallow
        // A refused connection surfaces at once; our retry policy (backoff, jitter, bounds) decides what happens next.
        httpConfiguration.connectionPool.retryConnectionEstablishment = false
        // AsyncHTTPClient's own client spans record `url.full` (transaction and order ids in Apple's paths): off; each
        // call is our client span instead, named by its route template (`once`).
        httpConfiguration.tracing.tracer = nil
        self.httpClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration)
        self.logger = logger
        self.onRetry = onRetry
    }

    /// Closes the connections. Call once, when done.
    public func shutdown() async {
        try? await httpClient.shutdown()
    }

    // MARK: - Endpoints

    /// [Get Notification History](https://developer.apple.com/documentation/appstoreserverapi/get-notification-history):
    /// one page (up to 20 notifications) of what Apple sent, with every send attempt.
    public func notificationHistory(bundleId: String, request: NotificationHistoryRequest, paginationToken: String?) async throws -> NotificationHistoryResponse {
        var path = "/inApps/v1/notifications/history"
        if let paginationToken { path += "?paginationToken=" + Self.percentEncoded(paginationToken) }
        return try await call(
            .POST, path, endpoint: "POST /inApps/v1/notifications/history", bundleId: bundleId, family: .notificationHistory, body: request.json,
            as: NotificationHistoryResponse.self)
    }

    /// [Request a Test Notification](https://developer.apple.com/documentation/appstoreserverapi/request-a-test-notification).
    public func requestTestNotification(bundleId: String) async throws -> SendTestNotificationResponse {
        try await call(
            .POST, "/inApps/v1/notifications/test", endpoint: "POST /inApps/v1/notifications/test", bundleId: bundleId, family: .testNotification, body: nil,
            as: SendTestNotificationResponse.self)
    }

    /// [Get Test Notification Status](https://developer.apple.com/documentation/appstoreserverapi/get-test-notification-status).
    /// Apple answers 4040008 (TestNotificationNotFoundError) until the notification was sent.
    public func testNotificationStatus(bundleId: String, testNotificationToken: String) async throws -> CheckTestNotificationResponse {
        try await call(
            .GET, "/inApps/v1/notifications/test/" + Self.percentEncoded(testNotificationToken), endpoint: "GET /inApps/v1/notifications/test/{testNotificationToken}",
            bundleId: bundleId, family: .testNotification, body: nil, as: CheckTestNotificationResponse.self)
    }

    // MARK: - The call, its retries and its errors

    /// One call whose answer is decoded as `type` (Apple's model, through the strict decoder the verifier uses); an
    /// answer not of Apple's shape is a `malformedResponse` naming the field.
    func call<T: Decodable>(
        _ method: HTTPMethod, _ path: String, endpoint: String, bundleId: String, family: EndpointFamily, body: JSONObject?, as type: T.Type
    ) async throws -> T {
        let object = try await call(method, path, endpoint: endpoint, bundleId: bundleId, family: family, body: body)
        do {
            return try ModelDecodingError.decode(type, from: .object(object))
        } catch {
            throw AppStoreServerAPIError(kind: .malformedResponse, httpStatus: 200, reason: "the answer is not what Apple documents: \(error)", endpoint: endpoint)
        }
    }

    func call(
        _ method: HTTPMethod, _ path: String, endpoint: String, bundleId: String, family: EndpointFamily, body: JSONObject?,
        rawBody: (contentType: String, bytes: [UInt8])? = nil
    ) async throws -> JSONObject {
        let policy = configuration.retryPolicy
        let started = ContinuousClock.now
        var attempt = 0
        while true {
            attempt += 1
            let perSecond = configuration.rateLimits.perSecond(family)
            // Request a Test Notification and Get Test Notification Status are limited each on its own.
            let bucket = AppStoreBudgetBucket(
                bundleId: bundleId, environment: configuration.environment.rawValue,
                endpointClass: family == .testNotification ? "\(family.rawValue)-\(method.rawValue)" : family.rawValue)
            do {
                try await budget.acquire(bucket, lane: AppStoreAPILane.current ?? defaultLane, perSecond: perSecond, maximumWait: configuration.rateLimits.maximumWait)
            } catch let refusal as AppStoreBudgetRefusal {
                let seconds = Double(refusal.wait.components.seconds) + Double(refusal.wait.components.attoseconds) / 1e18
                throw AppStoreServerAPIError(
                    kind: .throttled, retryAfter: Date().addingTimeInterval(seconds),
                    reason: "not sent: this app's \(family.rawValue) calls are over their budget, and the next turn is \(refusal.wait) away", endpoint: endpoint)
            }
            let error: AppStoreServerAPIError
            do {
                return try await once(method, path, endpoint: endpoint, bundleId: bundleId, body: body, rawBody: rawBody)
            } catch let failure as AppStoreServerAPIError {
                error = failure
            }
            // Apple said when to come back: no process of ours calls this class before then.
            if let until = error.retryAfter, error.httpStatus == 429 || error.httpStatus == 503 {
                await budget.pause(bucket, until: until, reason: "\(error.httpStatus ?? 0) \(error.errorCode.map(String.init) ?? "")".trimmingCharacters(in: .whitespaces))
            }
            guard error.isRetryable else { throw error }
            let elapsed = ContinuousClock.now - started
            let wait = Self.backoff(attempt: attempt, policy: policy, retryAfter: error.retryAfter)
            guard attempt < policy.maximumAttempts else {
                throw AppStoreServerAPIError(
                    kind: .retriesExhausted, httpStatus: error.httpStatus, errorCode: error.errorCode, errorMessage: error.errorMessage,
                    reason: "gave up after \(attempt) attempts: \(error.reason)", endpoint: endpoint)
            }
            guard elapsed + wait <= policy.maximumTotal else {
                throw AppStoreServerAPIError(
                    kind: .retriesExhausted, httpStatus: error.httpStatus, errorCode: error.errorCode, errorMessage: error.errorMessage,
                    reason: "gave up: the next try (in \(wait)) would pass the \(policy.maximumTotal) this call may take: \(error.reason)", endpoint: endpoint)
            }
            logger.notice("App Store Server API call failed, retrying", metadata: ["endpoint": "\(endpoint)", "attempt": "\(attempt)", "wait": "\(wait)", "error": "\(error)"])
            onRetry(error, wait)
            try await Task.sleep(for: wait)
        }
    }

    /// Full jitter: a random wait up to `initial × 2^(attempt−1)` (capped); a `Retry-After` is a floor, never cut short.
    public static func backoff(attempt: Int, policy: AppStoreServerAPIConfiguration.RetryPolicy, retryAfter: Date?, now: Date = Date()) -> Duration {
        let cap = min(policy.maximumBackoff, policy.initialBackoff * (1 << min(attempt - 1, 20)))
        let capMilliseconds = max(1, cap.components.seconds * 1000 + cap.components.attoseconds / 1_000_000_000_000_000)
        let jittered = Duration.milliseconds(Int64.random(in: capMilliseconds / 4...capMilliseconds))
        guard let retryAfter else { return jittered }
        let floor = Duration.milliseconds(Int64((retryAfter.timeIntervalSince(now) * 1000).rounded(.up)))
        // Past the floor by a little jitter, so many clients told the same instant do not all come back at once.
        return max(floor, .zero) + .milliseconds(Int64.random(in: 0...100))
    }

    /// One request as a client span named by its route template (`GET /inApps/v1/subscriptions/{transactionId}`):
    /// the host, the method, the template and the status; never the path's values or a query (docs/tracing.md).
    func once(
        _ method: HTTPMethod, _ path: String, endpoint: String, bundleId: String, body: JSONObject?, rawBody: (contentType: String, bytes: [UInt8])? = nil
    ) async throws -> JSONObject {
        try await withSpan(endpoint, ofKind: .client) { span in
            span.attributes["http.request.method"] = method.rawValue
            span.attributes["server.address"] = URL(string: configuration.baseURL)?.host
            span.attributes["url.template"] = String(endpoint.split(separator: " ", maxSplits: 1).last ?? "")
            do {
                return try await request(method, path, endpoint: endpoint, bundleId: bundleId, body: body, rawBody: rawBody)
            } catch let error as AppStoreServerAPIError {
                if let status = error.httpStatus { span.attributes["http.response.status_code"] = status }
                if let code = error.errorCode { span.attributes["appstore.error_code"] = Int(code) }
                span.setStatus(.init(code: .error, message: "\(error.kind)"))
                throw error
            }
        }
    }

    func request(
        _ method: HTTPMethod, _ path: String, endpoint: String, bundleId: String, body: JSONObject?, rawBody: (contentType: String, bytes: [UInt8])? = nil
    ) async throws -> JSONObject {
        var request = HTTPClientRequest(url: configuration.baseURL + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer " + signer.token(bundleId: bundleId))
        request.headers.add(name: "User-Agent", value: "appstore-notification-pipeline")
        request.headers.add(name: "Accept", value: "application/json")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body.serialized))
        } else if let rawBody {
            request.headers.add(name: "Content-Type", value: rawBody.contentType)
            request.body = .bytes(ByteBuffer(bytes: rawBody.bytes))
        }
        let status: Int
        let headers: HTTPHeaders
        var bytes: ByteBuffer
        do {
            let response = try await httpClient.execute(request, deadline: .now() + .nanoseconds(configuration.requestTimeout.nanosecondsClamped))
            status = Int(response.status.code)
            headers = response.headers
            bytes = try await response.body.collect(upTo: Self.maximumResponseBytes)
        } catch {
            throw AppStoreServerAPIError(kind: .transport, reason: "no answer from \(configuration.baseURL): \(Self.describeTransport(error))", endpoint: endpoint)
        }
        let data = bytes.readBytes(length: bytes.readableBytes) ?? []
        let parsed = try? StrictJSONParser().parse(data)
        if (200..<300).contains(status) {
            if data.isEmpty { return JSONObject() }
            guard case .object(let object)? = parsed else {
                throw AppStoreServerAPIError(
                    kind: .malformedResponse, httpStatus: status, reason: "the answer is not a JSON object (\(data.count) bytes, starting \(UntrustedText.quoted(String(decoding: data.prefix(60), as: UTF8.self), limit: 60)))",
                    endpoint: endpoint)
            }
            return object
        }
        var error = AppStoreServerAPIError(kind: .response, httpStatus: status, reason: "", endpoint: endpoint)
        if case .object(let object)? = parsed {
            error.errorCode = object["errorCode"]?.int64Value
            error.errorMessage = object["errorMessage"]?.stringValue.map { UntrustedText.escaped($0, limit: 300) }
        }
        if status == 429 || status == 503 || error.errorCode == AppleErrorCode.rateLimitExceeded {
            error.retryAfter = headers.first(name: "Retry-After").flatMap(Self.parseRetryAfter)
        }
        error.reason = switch status {
        case 401: AppleErrorCode.unauthorizedExplanation
        case 429: "rate limit exceeded" + (error.retryAfter.map { "; Apple allows the next call at \($0.formatted(.iso8601))" } ?? "")
        case 503 where error.retryAfter != nil: "Apple is unavailable; it allows the next call at \(error.retryAfter!.formatted(.iso8601))"
        default: error.isRetryable ? "Apple says this may succeed if tried again" : "Apple refused the request"
        }
        if error.errorCode == nil, !data.isEmpty, parsed == nil {
            error.reason += " (the body is not JSON: \(UntrustedText.quoted(String(decoding: data.prefix(80), as: UTF8.self), limit: 80)))"
        }
        throw error
    }

    /// Apple's `Retry-After` is a UNIX time in milliseconds. A small number is read as the HTTP standard's
    /// delay in seconds, so a proxy that rewrites it is still honoured.
    public static func parseRetryAfter(_ text: String) -> Date? {
        guard let value = Int64(text.trimmingCharacters(in: .whitespaces)), value >= 0 else { return nil }
        if value > 100_000_000_000 { return Date(timeIntervalSince1970: TimeInterval(value) / 1000) }
        return Date().addingTimeInterval(TimeInterval(value))
    }

    static func describeTransport(_ error: any Error) -> String {
        if let error = error as? HTTPClientError { return "\(error)" }
        return String(describing: error)
    }

    public static func percentEncoded(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}

extension Duration {
    var nanosecondsClamped: Int64 {
        let (seconds, attoseconds) = components
        return seconds > Int64.max / 1_000_000_000 ? Int64.max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
