import AppStoreNotifications
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Logging
import OpenAPIRuntime
import ServiceRuntime
import Synchronization

/// A refusal the customer API answers: an HTTP status and `{"error": {"code", "message"}}`. Every handler and
/// middleware throws these; `ErrorResponseMiddleware` writes them.
public struct CustomerAPIError: Error, Sendable, Hashable, CustomStringConvertible {
    public var status: Int
    public var code: String
    public var message: String
    public var headers: [String: String] = [:]

    public init(_ status: Int, _ code: String, _ message: String, headers: [String: String] = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    public var description: String { "\(status) \(code): \(message)" }

    static func notFound(_ what: String) -> CustomerAPIError { CustomerAPIError(404, "not_found", what) }
    static let unavailable = CustomerAPIError(503, "unavailable", "the database or the broker did not answer; retry later", headers: ["Retry-After": "1"])

    /// The connection guard's codes (`requestTimeout`) in this API's spelling (`request_timeout`).
    static func snakeCase(_ code: String) -> String {
        var result = ""
        for character in code {
            if character.isUppercase { result += "_" + character.lowercased() } else { result.append(character) }
        }
        return result
    }

    /// The JSON body, also used for the connection guard's own refusals (408, 413 before the body).
    public static func body(code: String, message: String) -> String {
        JSONObject(["error": .object(JSONObject(["code": .string(code), "message": .string(message)]))]).serialized
    }
}

/// Outermost: turns every thrown error into the JSON shape (a `CustomerAPIError` as it is; a request the
/// generated code could not decode as 400 `invalid_request`; anything else 500 `internal`, logged), and counts
/// `customer_api_requests_total{route,status}` by operation id.
struct ErrorResponseMiddleware: ServerMiddleware {
    let metrics: CustomerAPIMetrics
    let logger: Logger

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, metadata: ServerRequestMetadata, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, ServerRequestMetadata) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        do {
            let (response, responseBody) = try await next(request, body, metadata)
            metrics.request(route: operationID, status: response.status.code)
            return (response, responseBody)
        } catch {
            let refusal = Self.refusal(for: error)
            if refusal.status >= 500 && refusal.code == "internal" {
                logger.error("request failed", metadata: ["route": "\(operationID)", "error": "\(UntrustedText.escaped(Self.loggable(error), limit: 600))"])
            }
            metrics.request(route: operationID, status: refusal.status)
            var response = HTTPResponse(status: .init(code: refusal.status))
            response.headerFields[.contentType] = "application/json"
            for (name, value) in refusal.headers { if let field = HTTPField.Name(name) { response.headerFields[field] = value } }
            return (response, HTTPBody(CustomerAPIError.body(code: refusal.code, message: refusal.message)))
        }
    }

    /// What a failed request's log line says of its error: never the request itself. OpenAPIRuntime's
    /// `ServerError` describes the whole request, headers included, so its `Authorization` (a live key) would
    /// be in the log; only the cause and the underlying error are kept.
    static func loggable(_ error: any Error) -> String {
        guard let error = error as? ServerError else { return String(describing: error) }
        return "\(error.operationID): \(error.causeDescription): \(String(describing: error.underlyingError))"
    }

    static func refusal(for error: any Error) -> CustomerAPIError {
        if let error = error as? CustomerAPIError { return error }
        if let error = error as? ServerError {
            if let inner = error.underlyingError as? CustomerAPIError { return inner }
            if error.operationInput == nil {
                // The generated code could not decode the request: a missing or ill-typed field, a bad query value.
                return CustomerAPIError(400, "invalid_request", UntrustedText.escaped(error.causeDescription, limit: 300))
            }
        }
        return CustomerAPIError(500, "internal", "the request failed inside the service; it is logged")
    }
}

/// Puts the 202's `Location` back as the path it is, and the `Consistency-Token` as the `pg_lsn` it is (`16/B374D848`,
/// as in the JSON answer). The generated code writes every header as an OpenAPI "simple"-style value,
/// percent-encoding its slashes (`%2Fv1%2Fapps…`, `16%2FB374D848`), which no HTTP client follows; the value the
/// handler sets is already a path with percent-encoded segments (or a token with none), so one decoding restores it
/// exactly. A token sent back either way is read: the generated code decodes request headers.
struct LocationHeaderMiddleware: ServerMiddleware {
    static let consistencyToken = HTTPField.Name("Consistency-Token")!

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, metadata: ServerRequestMetadata, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, ServerRequestMetadata) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var (response, responseBody) = try await next(request, body, metadata)
        if let location = response.headerFields[.location], let path = location.removingPercentEncoding {
            response.headerFields[.location] = path
        }
        if let token = response.headerFields[Self.consistencyToken], let plain = token.removingPercentEncoding {
            response.headerFields[Self.consistencyToken] = plain
        }
        return (response, responseBody)
    }
}

/// Reads the request body at most up to the limit (the generated code would read it whole): a chunked body that
/// grows past `CUSTOMER_API_MAX_BODY_BYTES` is 413 `body_too_large` (an announced oversize length is already
/// refused by the connection guard, before the body).
struct BodyLimitMiddleware: ServerMiddleware {
    let maximumBytes: Int

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, metadata: ServerRequestMetadata, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, ServerRequestMetadata) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        guard let body else { return try await next(request, nil, metadata) }
        let bytes: [UInt8]
        do {
            bytes = try await [UInt8](collecting: body, upTo: maximumBytes)
        } catch {
            throw CustomerAPIError(413, "body_too_large", "the body is over the \(maximumBytes)-byte limit", headers: ["Connection": "close"])
        }
        return try await next(request, HTTPBody(bytes), metadata)
    }
}

/// `Authorization: Bearer ak_…`: the key's row (cached for at most `CUSTOMER_API_KEY_CACHE`, so a revoked key
/// is refused within a second), its hash compared in constant time (an unknown id against a fixed value, so an
/// answer does not tell whether a key exists), then the key's rate (`CUSTOMER_API_RATE_LIMIT`), the route's
/// bundle id and scope. A bundle id the key does not see gets one answer whether the app exists or not (no
/// tenant oracle), and a route without a bundle id is refused (fail closed).
struct AuthenticationMiddleware: ServerMiddleware {
    let keys: APIKeyCache
    let configuredBundleIds: Set<String>
    let rateLimiter: KeyRateLimiter
    /// Attempts with a key not known good, per client address (`CUSTOMER_API_AUTH_ATTEMPTS`, `_BURST`).
    let addressLimiter: KeyRateLimiter

    /// Operations Apple calls, authenticated by their signed body instead of a key (docs/customer-api.yaml: `security: []`).
    static let signedByApple: Set<String> = ["getRetentionMessage"]

    /// The scope each operation needs: purchases write, erasures erase, offers offers, everything else reads.
    static func scope(of operationID: String) -> APIKeyScope {
        switch operationID {
        case "postPurchase": .write
        case "eraseCustomer", "getErasure": .erase
        case "decideOffers": .offers
        default: .read
        }
    }

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, metadata: ServerRequestMetadata, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, ServerRequestMetadata) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        // Apple's real-time retention request carries no key: its signed body is its authentication (verified by the
        // handler as strictly as a notification). No address limit either: Apple calls from few addresses.
        if Self.signedByApple.contains(operationID) { return try await next(request, body, metadata) }
        let challenge = ["WWW-Authenticate": "Bearer"]
        guard let header = request.headerFields[.authorization] else {
            throw CustomerAPIError(401, "unauthorized", "send Authorization: Bearer <key> (pipelinectl api-keys create)", headers: challenge)
        }
        let token = header.hasPrefix("Bearer ") ? String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces) : ""
        let presented = APIKeySecret(presented: token)
        // Before any database work: a key id this process does not know as valid costs its client address a token
        // (given back when the key proves good), so random key ids cost at most `CUSTOMER_API_AUTH_ATTEMPTS` queries a
        // second per address; ids known unknown are answered from memory.
        let address = ClientAddressLocal.value ?? "unknown"
        let vouched = presented.map { keys.isKnownValid(id: $0.id) } ?? false
        if !vouched, let wait = addressLimiter.refusal(key: address) {
            throw CustomerAPIError(429, "rate_limited", "too many unauthenticated requests from this address; retry after \(wait) s", headers: ["Retry-After": String(wait)])
        }
        guard let presented else { throw CustomerAPIError(401, "unauthorized", "the key is unknown or revoked", headers: challenge) }
        let stored: APIKeyRecord?
        do {
            stored = try await keys.record(id: presented.id)
        } catch {
            throw CustomerAPIError.unavailable
        }
        let usable = stored.flatMap { $0.revokedAt == nil ? $0 : nil }
        guard APIKeySecret.matches(presented, stored: usable?.secretSHA256), let key = usable else {
            throw CustomerAPIError(401, "unauthorized", "the key is unknown or revoked", headers: challenge)
        }
        if !vouched {
            addressLimiter.refund(key: address)
            keys.noteAuthenticated(id: key.id)
        }
        if let wait = rateLimiter.refusal(key: key.id) {
            throw CustomerAPIError(429, "rate_limited", "this key is over its rate; retry after \(wait) s (other keys are not slowed)", headers: ["Retry-After": String(wait)])
        }
        await keys.noteUse(id: key.id)
        guard let bundleId = metadata.pathParameters["bundleId"].map(String.init),
            configuredBundleIds.contains(bundleId), key.bundleIds.isEmpty || key.bundleIds.contains(bundleId)
        else {
            throw CustomerAPIError(403, "forbidden_bundle", "this key does not see this app")
        }
        guard (APIKeyScope(rawValue: key.scope) ?? .read).allows(Self.scope(of: operationID)) else {
            throw CustomerAPIError(403, "insufficient_scope", "this operation needs a key of scope \(Self.scope(of: operationID).rawValue)")
        }
        return try await AuthenticatedKey.$id.withValue(key.id) { try await next(request, body, metadata) }
    }
}

/// The id of the key the current request was authenticated with (an erasure names who asked for it).
enum AuthenticatedKey {
    @TaskLocal static var id: String?
}

/// Key rows read from PostgreSQL, each reused for a short while: a flood of requests costs one query per key per
/// period, and a revocation takes effect within it.
final class APIKeyCache: Sendable {
    private let store: CustomerStore
    private let ttl: Duration
    private let entries = Mutex<[String: (record: APIKeyRecord?, read: ContinuousClock.Instant)]>([:])

    init(store: CustomerStore, ttl: Duration) {
        self.store = store
        self.ttl = ttl
    }

    /// When this process last wrote each key's `last_used_at`.
    private let touched = Mutex<[String: ContinuousClock.Instant]>([:])

    /// Writes the key's `last_used_at`, at most once a minute per key (per process, and the statement itself skips
    /// a row written in the last minute by another); a failure is not the request's.
    func noteUse(id: String) async {
        let now = ContinuousClock.now
        let due = touched.withLock { touched in
            if let last = touched[id], now - last < .seconds(60) { return false }
            if touched.count > 10_000 { touched.removeAll() }
            touched[id] = now
            return true
        }
        if due { try? await store.touchAPIKey(id: id) }
    }

    /// Key ids the database does not hold, remembered for `unknownTTL`: a key created since is found after that.
    private let unknown = Mutex<[String: ContinuousClock.Instant]>([:])
    static let unknownTTL: Duration = .seconds(10)

    /// Key ids that authenticated in the last `knownGoodTTL`: their requests skip the per-address limit of attempts
    /// (their rows are still read, each `ttl`, so a revocation takes effect as before).
    private let knownGood = Mutex<[String: ContinuousClock.Instant]>([:])
    static let knownGoodTTL: Duration = .seconds(600)

    func isKnownValid(id: String) -> Bool {
        let now = ContinuousClock.now
        return knownGood.withLock { $0[id] }.map { now - $0 < Self.knownGoodTTL } ?? false
    }

    func noteAuthenticated(id: String) {
        knownGood.withLock { knownGood in
            if knownGood.count > 10_000 { knownGood.removeAll() }
            knownGood[id] = .now
        }
    }

    func record(id: String) async throws -> APIKeyRecord? {
        let now = ContinuousClock.now
        if let entry = entries.withLock({ $0[id] }), now - entry.read < ttl { return entry.record }
        if let seen = unknown.withLock({ $0[id] }), now - seen < Self.unknownTTL { return nil }
        let record = try await store.apiKey(id: id)
        if record == nil {
            unknown.withLock { unknown in
                if unknown.count > 100_000 { unknown.removeAll() }
                unknown[id] = now
            }
            return nil
        }
        entries.withLock { entries in
            if entries.count > 10_000 { entries.removeAll() }
            entries[id] = (record, now)
        }
        return record
    }
}

/// The client address of the request being handled, set by `ClientAddressMiddleware` (below the OpenAPI layer,
/// which does not see the connection).
enum ClientAddressLocal {
    @TaskLocal static var value: String?
}

/// Puts the connection's peer address where `AuthenticationMiddleware` reads it.
struct ClientAddressMiddleware: RouterMiddleware {
    typealias Context = CustomerAPIRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await ClientAddressLocal.$value.withValue(context.remoteAddress?.ipAddress) { try await next(request, context) }
    }
}

/// The customer API's request context: Hummingbird's basic one, with the connection's peer address.
typealias CustomerAPIRequestContext = PeerAddressRequestContext
