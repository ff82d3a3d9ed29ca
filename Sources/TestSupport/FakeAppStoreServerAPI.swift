import AppStoreNotifications
import AppStoreServerAPI
import AppStoreServerAPIModels
import AsyncHTTPClient
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// Our stand-in for Apple's App Store Server API, for tests and the demo: it checks every JWT as Apple does,
/// "sends" minted notifications to an ingest URL as Apple would (recording each send attempt), serves Get
/// Notification History in pages of 20 over what it sent, and answers the test-notification endpoints. It can be
/// told to answer 429 with `Retry-After`, 500 with 5000001, any other error, a malformed page, or to drop the
/// connection, on chosen history requests.
public final class FakeAppStoreServerAPI: Sendable {
    public struct Configuration: Sendable {
        public var keyId: String
        public var issuerId: String
        /// The public half of the `.p8` key the client signs with.
        public var publicKey: P256.Signing.PublicKey
        public var bundleId: String
        public var environment: AppStoreNotifications.Environment
        /// Where "Apple" POSTs notifications (ingest's notification path).
        public var ingestURL: String?
        /// Signs the TEST notifications.
        public var minter: NotificationMinter
        public var pageSize = 20
        /// Get Test Notification Status answers 4040008 this many times before the status.
        public var testStatusNotReadyPolls = 2

        public init(keyId: String, issuerId: String, publicKey: P256.Signing.PublicKey, bundleId: String, environment: AppStoreNotifications.Environment, ingestURL: String?, minter: NotificationMinter) {
            self.keyId = keyId
            self.issuerId = issuerId
            self.publicKey = publicKey
            self.bundleId = bundleId
            self.environment = environment
            self.ingestURL = ingestURL
            self.minter = minter
        }
    }

    /// What the fake answers instead of a page, on a chosen history request.
    public enum Fault: Sendable {
        /// 429 with errorCode 4290000 and `Retry-After` this many milliseconds from now (a UNIX time in ms).
        case rateLimit(retryAfterMilliseconds: Int64)
        /// An error status with Apple's body `{errorCode, errorMessage}`.
        case apiError(status: Int, errorCode: Int64, errorMessage: String)
        /// 200 with this body (not Apple's shape).
        case malformedBody(String)
        /// The connection is closed after the response head, before any byte of the body.
        case drop
    }

    /// A notification "Apple" sent, with its attempts.
    public struct SentNotification: Sendable {
        public var signedPayload: String
        public var notificationType: String?
        public var subtype: String?
        public var transactionIds: Set<String>
        public var sendAttempts: [SendAttemptItem]
    }

    /// One request the fake saw.
    public struct LoggedRequest: Sendable {
        public var method: String
        public var path: String
        public var paginationToken: String?
        public var status: Int
        public var at: Date
        /// Why a JWT was refused (401), in the fake's words.
        public var refusal: String?
    }

    struct State {
        var configuration: Configuration
        var sent: [SentNotification] = []
        var historyRequests = 0
        var faults: [Int: Fault] = [:]
        var tokens: [String: Int] = [:]
        var requests: [LoggedRequest] = []
        var tests: [String: (polls: Int, signedPayload: String?, attempts: [SendAttemptItem])] = [:]
        /// Extra entries served in history only (e.g. an unknown send-attempt result).
        var extraHistory: [SentNotification] = []
        /// Apple's truth per subscription (originalTransactionId), for statuses and transaction history.
        var subscriptions: [String: Subscription] = [:]
        /// Any transaction id → its subscription.
        var transactionOwners: [String: String] = [:]
        /// Raw statuses answers by id, to serve what Apple never would (a forged JWS, an unknown status).
        var rawStatuses: [String: String] = [:]
        /// Consumption answers received (transaction id → body).
        var consumptionAnswers: [String: String] = [:]
        /// Set App Account Token calls received (originalTransactionId → appAccountToken), in order.
        var appAccountTokens: [(originalTransactionId: String, appAccountToken: String)] = []
        /// Family-shared originalTransactionIds: Set App Account Token answers 4000185.
        var familyShared: Set<String> = []
        /// Orders: order id → signed transactions (Look Up Order ID).
        var orders: [String: [String]] = [:]
        /// Refunded transactions by any transaction id of the customer, most recent first (Get Refund History).
        var refunds: [String: [String]] = [:]
        /// Renewal-date extensions: every request body received, Apple's refusal per originalTransactionId, the answer
        /// per request identifier (a retry gets the first answer), mass extensions' status by request identifier.
        var extensionBodies: [(path: String, body: JSONObject)] = []
        var extensionRefusals: [String: (status: Int, code: Int64, message: String)] = [:]
        var extensionAnswers: [String: JSONObject] = [:]
        var massExtensions: [String: JSONObject] = [:]
        /// App transactions by any transaction id of the customer (Get App Transaction Info).
        var appTransactions: [String: String] = [:]
        /// Apple's per-app limit, when set: requests in one wall-clock second past it are answered 429.
        var rateLimitPerSecond: Int?
        /// Requests per wall-clock second (UNIX seconds): all that arrived, and those answered 429 by the limit.
        var perSecond: [Int64: (arrived: Int, throttled: Int)] = [:]
    }

    /// What Apple knows of one subscription: its current status and every signed transaction, oldest first.
    public struct Subscription: Sendable {
        public var originalTransactionId: String
        public var subscriptionGroupIdentifier: String
        public var status: Int32
        public var signedTransactionInfo: String
        public var signedRenewalInfo: String?
        public var history: [String]

        public init(originalTransactionId: String, subscriptionGroupIdentifier: String, status: Int32, signedTransactionInfo: String, signedRenewalInfo: String?, history: [String]) {
            self.originalTransactionId = originalTransactionId
            self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
            self.status = status
            self.signedTransactionInfo = signedTransactionInfo
            self.signedRenewalInfo = signedRenewalInfo
            self.history = history
        }
    }

    let state: Mutex<State>
    let httpClient: HTTPClient
    let logger: Logger
    let server = Mutex<LoopbackServer?>(nil)
    let retention = Mutex(RetentionMessaging())

    public init(configuration: Configuration, logger: Logger = Logger(label: "fake-appstore-api")) {
        state = Mutex(State(configuration: configuration))
        var httpConfiguration = HTTPClient.Configuration()
        httpConfiguration.timeout = .init(connect: .seconds(2), read: .seconds(10))
        // One attempt is one connection try, as Apple records it (AsyncHTTPClient would retry a refused connect until the timeout).
        httpConfiguration.connectionPool.retryConnectionEstablishment = false
        httpClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration)
        self.logger = logger
    }

    // MARK: - Control (the test's side)

    /// Starts serving on `host:port` (0: a free port) and returns the port.
    public func start(host: String = "127.0.0.1", port requestedPort: Int = 0, extraRoutes: @Sendable (Router<BasicRequestContext>) -> Void = { _ in }) async throws -> Int {
        let router = Router()
        router.add(middleware: RateLimit(fake: self))
        extraRoutes(router)
        registerRetentionMessaging(on: router)
        router.post("/inApps/v1/notifications/history") { request, _ in try await self.history(request) }
        router.post("/inApps/v1/notifications/test") { request, _ in try await self.requestTest(request) }
        router.get("/inApps/v1/notifications/test/:token") { request, context in try await self.testStatus(request, token: context.parameters.get("token") ?? "") }
        router.get("/inApps/v1/subscriptions/:id") { request, context in try await self.statuses(request, id: context.parameters.get("id") ?? "") }
        router.get("/inApps/v2/history/:id") { request, context in try await self.transactionHistory(request, id: context.parameters.get("id") ?? "") }
        router.get("/inApps/v1/transactions/:id") { request, context in try await self.transactionInfo(request, id: context.parameters.get("id") ?? "") }
        router.put("/inApps/v2/transactions/consumption/:id") { request, context in try await self.consumption(request, id: context.parameters.get("id") ?? "") }
        router.put("/inApps/v1/transactions/:id/appAccountToken") { request, context in try await self.setAppAccountToken(request, id: context.parameters.get("id") ?? "") }
        router.get("/inApps/v1/lookup/:orderId") { request, context in try await self.lookUpOrder(request, orderId: context.parameters.get("orderId") ?? "") }
        router.get("/inApps/v2/refund/lookup/:id") { request, context in try await self.refundHistory(request, id: context.parameters.get("id") ?? "") }
        router.put("/inApps/v1/subscriptions/extend/:id") { request, context in try await self.extend(request, id: context.parameters.get("id") ?? "") }
        router.post("/inApps/v1/subscriptions/extend/mass") { request, _ in try await self.massExtend(request) }
        router.get("/inApps/v1/subscriptions/extend/mass/:product/:rid") { request, context in
            try await self.massExtensionStatus(request, requestIdentifier: context.parameters.get("rid") ?? "")
        }
        router.get("/inApps/v1/transactions/appTransactions/:id") { request, context in try await self.appTransaction(request, id: context.parameters.get("id") ?? "") }
        let server = try await LoopbackServer.start(router, name: "fake-appstore-api", host: host, port: requestedPort, logger: logger)
        self.server.withLock { $0 = server }
        return server.port
    }

    /// The base URL to give the client (`APPSTORE_API_BASE_URL`).
    public var baseURL: String { "http://127.0.0.1:\(server.withLock { $0 }?.port ?? 0)" }

    /// Enforces Apple's per-app limit as Apple does: past `perSecond` requests in one second, 429 with errorCode
    /// 4290000 and `Retry-After` (UNIX milliseconds) at the next second. nil lifts it.
    public func setRateLimit(perSecond: Int?) {
        state.withLock { $0.rateLimitPerSecond = perSecond }
    }

    /// Requests per wall-clock second (UNIX seconds), arrived and answered 429 by the limit.
    public var requestsPerSecond: [Int64: (arrived: Int, throttled: Int)] {
        state.withLock { $0.perSecond }
    }

    /// Counts every request; answers 429 past the limit.
    struct RateLimit: RouterMiddleware {
        typealias Context = BasicRequestContext
        let fake: FakeAppStoreServerAPI

        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            let now = Date().timeIntervalSince1970
            let second = Int64(now.rounded(.down))
            let over = fake.state.withLock { state in
                state.perSecond[second, default: (0, 0)].arrived += 1
                guard let limit = state.rateLimitPerSecond, state.perSecond[second]!.arrived > limit else { return false }
                state.perSecond[second]!.throttled += 1
                return true
            }
            guard over else { return try await next(request, context) }
            fake.log(request, status: 429)
            return FakeAppStoreServerAPI.appleError(
                .tooManyRequests, 4_290_000, "Rate limit exceeded.", headers: [HTTPField.Name("Retry-After")!: String((second + 1) * 1000)])
        }
    }

    public func stop() async {
        await server.withLock { $0 }?.stop()
        try? await httpClient.shutdown()
    }

    /// Sets what to answer on the `n`th history request (1-based, counting every history request).
    public func setFault(_ fault: Fault?, onHistoryRequest n: Int) {
        state.withLock { $0.faults[n] = fault }
    }

    public func setIngestURL(_ url: String?) {
        state.withLock { $0.configuration.ingestURL = url }
    }

    /// Sets (or moves on) Apple's truth for a subscription: its status, latest signed transaction and renewal info,
    /// and its whole history; every transaction id in the history then finds it.
    /// Apple's refund history for `ids` (any transaction id of the customer): `signed`, most recent first.
    public func setRefunds(_ signed: [String], for ids: [String]) {
        state.withLock { state in for id in ids { state.refunds[id] = signed } }
    }

    /// Apple refuses extending `originalTransactionId` with `code` (e.g. 4030004 SubscriptionExtensionIneligibleError).
    public func refuseExtension(of originalTransactionId: String, status: Int = 400, code: Int64, message: String) {
        state.withLock { $0.extensionRefusals[originalTransactionId] = (status, code, message) }
    }

    /// The bodies of the extension requests received (single and mass), in order.
    public var extensionRequests: [(path: String, body: JSONObject)] { state.withLock { $0.extensionBodies } }

    /// A mass extension finished: `extend status` then reports it.
    public func completeMassExtension(_ requestIdentifier: String, succeeded: Int64, failed: Int64, at date: Int64) {
        state.withLock { state in
            state.massExtensions[requestIdentifier]?["complete"] = .bool(true)
            state.massExtensions[requestIdentifier]?["completeDate"] = .number(JSONNumber(date))
            state.massExtensions[requestIdentifier]?["succeededCount"] = .number(JSONNumber(succeeded))
            state.massExtensions[requestIdentifier]?["failedCount"] = .number(JSONNumber(failed))
        }
    }

    /// Apple's app transaction for `ids` (any transaction id of the customer).
    public func setAppTransaction(_ signed: String, for ids: [String]) {
        state.withLock { state in for id in ids { state.appTransactions[id] = signed } }
    }

    public func setSubscription(_ subscription: Subscription) {
        let ids = subscription.history.compactMap { UnverifiedPeek.payload(of: $0)?["transactionId"]?.stringValue }
        state.withLock { state in
            state.subscriptions[subscription.originalTransactionId] = subscription
            state.transactionOwners[subscription.originalTransactionId] = subscription.originalTransactionId
            for id in ids { state.transactionOwners[id] = subscription.originalTransactionId }
        }
    }

    /// Answers Get All Subscription Statuses for `id` with this body, whatever it is (bad-input tests).
    public func setRawStatuses(_ body: String, for id: String) {
        state.withLock { $0.rawStatuses[id] = body }
    }

    public var consumptionAnswers: [String: String] { state.withLock { $0.consumptionAnswers } }

    public var requests: [LoggedRequest] { state.withLock { $0.requests } }
    public var sent: [SentNotification] { state.withLock { $0.sent } }
    public var historyRequestCount: Int { state.withLock { $0.historyRequests } }

    /// Adds a history entry that was never POSTed (e.g. with a send-attempt result Apple may add one day).
    public func addHistoryOnly(_ signedPayload: String, attempts: [SendAttemptItem]) {
        let entry = Self.entry(signedPayload, attempts: attempts)
        state.withLock { $0.extraHistory.append(entry) }
    }

    /// "Apple sends" `signedPayload`: POSTs it to the ingest URL once and records the attempt as Apple would.
    @discardableResult
    public func send(_ signedPayload: String) async -> SendAttemptResult {
        let url = state.withLock { $0.configuration.ingestURL }
        let attemptDate = Int64(Date().timeIntervalSince1970 * 1000)  // when the attempt began, as Apple reports it
        let result = await post(signedPayload, to: url)
        let attempt = SendAttemptItem(attemptDate: attemptDate, sendAttemptResult: result)
        let entry = Self.entry(signedPayload, attempts: [attempt])
        state.withLock { $0.sent.append(entry) }
        return result
    }

    static func entry(_ signedPayload: String, attempts: [SendAttemptItem]) -> SentNotification {
        let payload = UnverifiedPeek.payload(of: signedPayload)
        var ids: Set<String> = []
        if let nested = payload?["data"]?.objectValue?["signedTransactionInfo"]?.stringValue, let transaction = UnverifiedPeek.payload(of: nested) {
            for key in ["transactionId", "originalTransactionId"] { if let id = transaction[key]?.stringValue { ids.insert(id) } }
        }
        return SentNotification(
            signedPayload: signedPayload, notificationType: payload?["notificationType"]?.stringValue, subtype: payload?["subtype"]?.stringValue,
            transactionIds: ids, sendAttempts: attempts)
    }

    func post(_ signedPayload: String, to url: String?) async -> SendAttemptResult {
        guard let url else { return .noResponse }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: NotificationMinter.body(signedPayload)))
        do {
            let response = try await httpClient.execute(request, timeout: .seconds(10))
            _ = try? await response.body.collect(upTo: 1 << 20)
            return response.status.code == 200 ? .success : .unsuccessfulHTTPResponseCode
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return .timedOut
        } catch {
            return .socketIssue
        }
    }

    // MARK: - Apple's side

    /// Checks the bearer token exactly as the issue lists Apple's checks; nil when it passes, else why not.
    func refusal(_ request: Request) -> String? {
        let configuration = state.withLock { $0.configuration }
        guard let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer ") else { return "no bearer token" }
        let parts = authorization.dropFirst("Bearer ".count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerBytes = Base64.decode(parts[0], alphabet: .url), let header = try? StrictJSONParser().parseObject(headerBytes),
            let claimBytes = Base64.decode(parts[1], alphabet: .url), let claims = try? StrictJSONParser().parseObject(claimBytes),
            let signatureBytes = Base64.decode(parts[2], alphabet: .url)
        else { return "not a JWT" }
        guard header["alg"]?.stringValue == "ES256" else { return "alg is not ES256" }
        guard header["typ"]?.stringValue == "JWT" else { return "typ is not JWT" }
        guard header["kid"]?.stringValue == configuration.keyId else { return "unknown kid" }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            configuration.publicKey.isValidSignature(signature, for: Array((parts[0] + "." + parts[1]).utf8))
        else { return "bad signature" }
        guard claims["iss"]?.stringValue == configuration.issuerId else { return "wrong iss" }
        guard claims["aud"]?.stringValue == AppStoreTokenSigner.audience else { return "wrong aud" }
        guard claims["bid"]?.stringValue == configuration.bundleId else { return "wrong bid" }
        guard let iat = claims["iat"]?.int64Value, let exp = claims["exp"]?.int64Value else { return "iat or exp missing" }
        let now = Int64(Date().timeIntervalSince1970)
        guard exp - iat <= 3_600 else { return "exp more than 60 minutes after iat" }
        guard exp > now else { return "expired" }
        guard iat <= now + 60 else { return "issued in the future" }
        return nil
    }

    /// Apple's 401 (no body) for a request whose token fails a check, logged with the reason; nil when it passes.
    func unauthorized(_ request: Request) -> Response? {
        guard let refusal = refusal(request) else { return nil }
        log(request, status: 401, refusal: refusal)
        return Response(status: .unauthorized)
    }

    func log(_ request: Request, status: Int, refusal: String? = nil) {
        let entry = LoggedRequest(
            method: request.method.rawValue, path: request.uri.path, paginationToken: request.uri.queryParameters.get("paginationToken").map { String($0) }, status: status, at: Date(),
            refusal: refusal)
        state.withLock { $0.requests.append(entry) }
    }

    static func json(_ status: HTTPResponse.Status, _ object: JSONObject, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: object.serialized)))
    }

    static func appleError(_ status: HTTPResponse.Status, _ code: Int64, _ message: String, headers: HTTPFields = [:]) -> Response {
        json(status, JSONObject(["errorCode": .number(JSONNumber(code)), "errorMessage": .string(message)]), headers: headers)
    }

    func history(_ request: Request) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let body = try await request.body.collect(upTo: 1 << 20)
        guard let object = try? StrictJSONParser().parseObject(Array(buffer: body)), let query = try? ModelDecodingError.decode(NotificationHistoryRequest.self, from: .object(object)) else {
            log(request, status: 400)
            return Self.appleError(.badRequest, 4_000_000, "Invalid request.")
        }
        let token = request.uri.queryParameters.get("paginationToken").map { String($0) }
        let (fault, answer): (Fault?, Response) = state.withLock { state in
            state.historyRequests += 1
            if let fault = state.faults[state.historyRequests] { return (fault, Response(status: .ok)) }
            var offset = 0
            if let token {
                guard let known = state.tokens[token] else { return (nil, Self.appleError(.badRequest, 4_000_014, "Invalid pagination token.")) }
                offset = known
            }
            if query.notificationType != nil, query.transactionId != nil {
                return (nil, Self.appleError(.badRequest, 4_000_019, "Invalid request. Only one of notificationType or transactionId may be supplied."))
            }
            let matching = (state.sent + state.extraHistory).filter { entry in
                let first = entry.sendAttempts.compactMap(\.attemptDate).min() ?? 0
                guard first >= query.startDate, first < query.endDate else { return false }
                if query.onlyFailures == true, entry.sendAttempts.contains(where: { $0.sendAttemptResult == .success }) { return false }
                if let type = query.notificationType, entry.notificationType != type { return false }
                if let subtype = query.notificationSubtype, entry.subtype != subtype { return false }
                if let id = query.transactionId, !entry.transactionIds.contains(id) { return false }
                return true
            }
            let page = Array(matching.dropFirst(offset).prefix(state.configuration.pageSize))
            let hasMore = offset + page.count < matching.count
            var response = NotificationHistoryResponse(
                notificationHistory: page.map { NotificationHistoryResponseItem(signedPayload: $0.signedPayload, sendAttempts: $0.sendAttempts) }, hasMore: hasMore,
                paginationToken: nil)
            if hasMore {
                let next = UUID().uuidString
                state.tokens[next] = offset + page.count
                response.paginationToken = next
            }
            return (nil, Self.json(.ok, response.json))
        }
        switch fault {
        case nil:
            log(request, status: Int(answer.status.code))
            return answer
        case .rateLimit(let milliseconds)?:
            log(request, status: 429)
            let at = Int64(Date().timeIntervalSince1970 * 1000) + milliseconds
            return Self.appleError(.tooManyRequests, 4_290_000, "Rate limit exceeded.", headers: [HTTPField.Name("Retry-After")!: String(at)])
        case .apiError(let status, let code, let message)?:
            log(request, status: status)
            return Self.appleError(HTTPResponse.Status(code: status), code, message)
        case .malformedBody(let text)?:
            log(request, status: 200)
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: text)))
        case .drop?:
            log(request, status: 0)
            return Response(status: .ok, headers: [.contentLength: "4096"], body: ResponseBody { _ in throw FakeAPIError(reason: "dropped on purpose") })
        }
    }

    func statuses(_ request: Request, id: String) async throws -> Response {
        answer(request) { state in
            if let raw = state.rawStatuses[id] {
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: raw)))
            }
            guard let owner = state.transactionOwners[id], let subscription = state.subscriptions[owner] else {
                return Self.appleError(.notFound, 4_040_010, "Transaction id not found.")
            }
            var item = JSONObject([
                "originalTransactionId": .string(subscription.originalTransactionId), "status": .number(JSONNumber(Int64(subscription.status))),
                "signedTransactionInfo": .string(subscription.signedTransactionInfo),
            ])
            if let renewal = subscription.signedRenewalInfo { item["signedRenewalInfo"] = .string(renewal) }
            return Self.json(.ok, JSONObject([
                "environment": .string(state.configuration.environment.rawValue), "bundleId": .string(state.configuration.bundleId),
                "appAppleId": .number(JSONNumber(state.configuration.minter.appAppleId)),
                "data": .array([.object(JSONObject([
                    "subscriptionGroupIdentifier": .string(subscription.subscriptionGroupIdentifier), "lastTransactions": .array([.object(item)]),
                ]))]),
            ]))
        }
    }

    /// Transaction History v2, oldest first, 20 a page; `revision` is how many of the customer's transactions
    /// the caller has seen, so a later call with it returns only what was added since.
    func transactionHistory(_ request: Request, id: String) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let revision = request.uri.queryParameters.get("revision").map { String($0) }
        let answer: Response = state.withLock { state in
            guard let owner = state.transactionOwners[id], let subscription = state.subscriptions[owner] else {
                return Self.appleError(.notFound, 4_040_010, "Transaction id not found.")
            }
            var offset = 0
            if let revision {
                guard revision.hasPrefix("rev-"), let seen = Int(revision.dropFirst(4)), seen <= subscription.history.count else {
                    return Self.appleError(.badRequest, 4_000_005, "Invalid request revision.")
                }
                offset = seen
            }
            let page = Array(subscription.history.dropFirst(offset).prefix(state.configuration.pageSize))
            let seen = offset + page.count
            return Self.json(.ok, JSONObject([
                "revision": .string("rev-\(seen)"), "hasMore": .bool(seen < subscription.history.count), "bundleId": .string(state.configuration.bundleId),
                "appAppleId": .number(JSONNumber(state.configuration.minter.appAppleId)), "environment": .string(state.configuration.environment.rawValue),
                "signedTransactions": .array(page.map(JSONValue.string)),
            ]))
        }
        log(request, status: Int(answer.status.code))
        return answer
    }

    /// Get Transaction Info: that transaction as signed in the subscription's history (or its latest).
    func transactionInfo(_ request: Request, id: String) async throws -> Response {
        answer(request) { state in
            guard let owner = state.transactionOwners[id], let subscription = state.subscriptions[owner] else {
                return Self.appleError(.notFound, 4_040_010, "Transaction id not found.")
            }
            let signed = subscription.history.first { UnverifiedPeek.payload(of: $0)?["transactionId"]?.stringValue == id } ?? subscription.signedTransactionInfo
            return Self.json(.ok, JSONObject(["signedTransactionInfo": .string(signed)]))
        }
    }

    func refundHistory(_ request: Request, id: String) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let start = request.uri.queryParameters.get("revision").flatMap { Int($0.dropFirst("rev-".count)) } ?? 0
        let answer: Response = state.withLock { state in
            guard let all = state.refunds[id] else { return Self.appleError(.notFound, 4_040_010, "Transaction id not found.") }
            let page = Array(all.dropFirst(start).prefix(state.configuration.pageSize))
            let next = start + page.count
            return Self.json(.ok, JSONObject([
                "signedTransactions": .array(page.map { .string($0) }), "revision": .string("rev-\(next)"), "hasMore": .bool(next < all.count),
            ]))
        }
        log(request, status: Int(answer.status.code))
        return answer
    }

    func extend(_ request: Request, id: String) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let body = (try? StrictJSONParser().parseObject(Array(buffer: try await request.body.collect(upTo: 1 << 16)))) ?? JSONObject()
        let answer: Response = state.withLock { state in
            state.extensionBodies.append((request.uri.path, body))
            guard let days = body["extendByDays"]?.int64Value, (1...90).contains(days) else {
                return Self.appleError(.badRequest, 4_000_009, "Invalid extend by days value.")
            }
            guard let reason = body["extendReasonCode"]?.int64Value, (0...3).contains(reason) else {
                return Self.appleError(.badRequest, 4_000_010, "Invalid extend reason code.")
            }
            guard let requestIdentifier = body["requestIdentifier"]?.stringValue, !requestIdentifier.isEmpty else {
                return Self.appleError(.badRequest, 4_000_011, "Invalid request identifier.")
            }
            if let refusal = state.extensionRefusals[id] {
                return Self.appleError(HTTPResponse.Status(code: refusal.status), refusal.code, refusal.message)
            }
            if state.familyShared.contains(id) { return Self.appleError(.badRequest, 4_030_007, "Family shared subscription extension ineligible.") }
            guard state.subscriptions[id] != nil || state.transactionOwners[id] != nil else {
                return Self.appleError(.notFound, 4_040_005, "Original transaction id not found.")
            }
            let answer = state.extensionAnswers[requestIdentifier] ?? JSONObject([
                "originalTransactionId": .string(id), "webOrderLineItemId": .string("9" + id), "success": .bool(true),
                "effectiveDate": .number(JSONNumber(Int64(Date().timeIntervalSince1970 * 1000) + days * 86_400_000)),
            ])
            state.extensionAnswers[requestIdentifier] = answer
            return Self.json(.ok, answer)
        }
        log(request, status: Int(answer.status.code))
        return answer
    }

    /// An authorized request's answer, made from the state under its lock, and logged with its status.
    func answer(_ request: Request, _ make: (inout State) -> Response) -> Response {
        if let refused = unauthorized(request) { return refused }
        let answer: Response = state.withLock { state in make(&state) }
        log(request, status: Int(answer.status.code))
        return answer
    }

    func massExtend(_ request: Request) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let body = (try? StrictJSONParser().parseObject(Array(buffer: try await request.body.collect(upTo: 1 << 16)))) ?? JSONObject()
        let answer: Response = state.withLock { state in
            state.extensionBodies.append((request.uri.path, body))
            guard let requestIdentifier = body["requestIdentifier"]?.stringValue, !requestIdentifier.isEmpty, body["productId"]?.stringValue != nil else {
                return Self.appleError(.badRequest, 4_000_011, "Invalid request identifier.")
            }
            if state.massExtensions[requestIdentifier] == nil {
                state.massExtensions[requestIdentifier] = JSONObject([
                    "requestIdentifier": .string(requestIdentifier), "complete": .bool(false), "succeededCount": .number(JSONNumber(Int64(0))),
                    "failedCount": .number(JSONNumber(Int64(0))),
                ])
            }
            return Self.json(.ok, JSONObject(["requestIdentifier": .string(requestIdentifier)]))
        }
        log(request, status: Int(answer.status.code))
        return answer
    }

    func massExtensionStatus(_ request: Request, requestIdentifier: String) async throws -> Response {
        answer(request) { state in
            guard let status = state.massExtensions[requestIdentifier] else { return Self.appleError(.notFound, 4_040_009, "Invalid request identifier.") }
            return Self.json(.ok, status)
        }
    }

    func appTransaction(_ request: Request, id: String) async throws -> Response {
        answer(request) { state in
            guard let signed = state.appTransactions[id] else { return Self.appleError(.notFound, 4_040_010, "Transaction id not found.") }
            return Self.json(.ok, JSONObject(["signedAppTransactionInfo": .string(signed)]))
        }
    }

    func consumption(_ request: Request, id: String) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let body = try await request.body.collect(upTo: 1 << 16)
        guard let object = try? StrictJSONParser().parseObject(Array(buffer: body)), object["customerConsented"] == .bool(true),
            object["deliveryStatus"]?.stringValue != nil, object["sampleContentProvided"] != nil
        else {
            log(request, status: 400)
            return Self.appleError(.badRequest, 4_000_035, "Invalid customer consented.")
        }
        state.withLock { $0.consumptionAnswers[id] = object.serialized }
        log(request, status: 202)
        return Response(status: .accepted)
    }

    /// Set App Account Token: a UUID body, 4000185 for a family-shared transaction, 4040010 for an unknown one.
    func setAppAccountToken(_ request: Request, id: String) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let body = try await request.body.collect(upTo: 1 << 16)
        guard let object = try? StrictJSONParser().parseObject(Array(buffer: body)), let token = object["appAccountToken"]?.stringValue, UUID(uuidString: token) != nil
        else {
            log(request, status: 400)
            return Self.appleError(.badRequest, 4_000_183, "Invalid request. The app account token field must be a valid UUID.")
        }
        let family = state.withLock { $0.familyShared.contains(id) }
        if family {
            log(request, status: 400)
            return Self.appleError(.badRequest, 4_000_185, "Invalid request. Family Sharing transactions aren't supported by this endpoint.")
        }
        state.withLock { $0.appAccountTokens.append((id, token)) }
        log(request, status: 200)
        return Response(status: .ok)
    }

    /// Look Up Order ID: `status` 0 with the order's signed transactions, or 1 for an unknown order id.
    func lookUpOrder(_ request: Request, orderId: String) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        let signed = state.withLock { $0.orders[orderId] }
        log(request, status: 200)
        let body = JSONObject(["status": .number(JSONNumber(signed == nil ? 1 : 0)), "signedTransactions": .array((signed ?? []).map { .string($0) })])
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body.serialized)))
    }

    /// Set App Account Token calls received, in order.
    public var appAccountTokenCalls: [(originalTransactionId: String, appAccountToken: String)] { state.withLock { $0.appAccountTokens } }

    /// Marks a subscription family-shared (Set App Account Token answers 4000185).
    public func setFamilyShared(_ originalTransactionId: String) {
        state.withLock { _ = $0.familyShared.insert(originalTransactionId) }
    }

    /// Serves `signedTransactions` for `orderId` (Look Up Order ID).
    public func setOrder(_ orderId: String, signedTransactions: [String]) {
        state.withLock { $0.orders[orderId] = signedTransactions }
    }

    func requestTest(_ request: Request) async throws -> Response {
        if let refused = unauthorized(request) { return refused }
        log(request, status: 200)
        let token = UUID().uuidString.lowercased() + "_" + String(Int64(Date().timeIntervalSince1970 * 1000))
        let configuration = state.withLock { state in
            state.tests[token] = (0, nil, [])
            return state.configuration
        }
        let payload = JSONObject([
            "notificationType": .string("TEST"), "notificationUUID": .string(UUID().uuidString.lowercased()),
            "data": .object(JSONObject([
                "appAppleId": .number(JSONNumber(configuration.minter.appAppleId)), "bundleId": .string(configuration.bundleId),
                "bundleVersion": .string("1"), "environment": .string(configuration.environment.rawValue),
            ])),
            "version": .string("2.0"), "signedDate": .number(JSONNumber(Int64(Date().timeIntervalSince1970 * 1000))),
        ])
        let signed = configuration.minter.chain.sign(payload)
        // Apple sends it shortly after answering.
        Task {
            let attemptDate = Int64(Date().timeIntervalSince1970 * 1000)
            let result = await self.post(signed, to: configuration.ingestURL)
            let attempt = SendAttemptItem(attemptDate: attemptDate, sendAttemptResult: result)
            self.state.withLock { $0.tests[token] = ($0.tests[token]?.polls ?? 0, signed, [attempt]) }
        }
        return Self.json(.ok, JSONObject(["testNotificationToken": .string(token)]))
    }

    func testStatus(_ request: Request, token: String) async throws -> Response {
        answer(request) { state in
            guard var test = state.tests[token] else { return Self.appleError(.badRequest, 4_000_020, "Invalid test notification token.") }
            test.polls += 1
            state.tests[token] = test
            guard test.polls > state.configuration.testStatusNotReadyPolls, let signed = test.signedPayload else {
                return Self.appleError(.notFound, 4_040_008, "Either the test notification token is expired or the notification and status are not yet available.")
            }
            return Self.json(.ok, CheckTestNotificationResponse(signedPayload: signed, sendAttempts: test.attempts).json)
        }
    }
}

public struct FakeAPIError: Error, CustomStringConvertible {
    public var reason: String
    public init(reason: String) { self.reason = reason }
    public var description: String { reason }
}
