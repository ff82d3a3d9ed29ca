import AppStoreNotifications
import EntitlementStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdBcrypt
import KafkaClient
import Logging
import NIOPosix
import X509

/// The console's routes. Every page but `/login` (and the stylesheet) needs a session; every state change is a POST
/// carrying the session's CSRF token; actions need the support or admin role and a reason, recorded in the audit.
struct ConsolePages: Sendable {
    let configuration: ConsoleConfiguration
    /// What the pages read, and what the actions write (the audit is the store's).
    let store: ConsoleStore, actions: ConsoleActions
    /// Where the pages' reads go (the primary, or a replica that replayed far enough: docs/scale.md); sessions, the
    /// audit's writes and every action stay on `store`.
    let reads: ReadRouter
    let metrics: ConsoleMetrics, logger: Logger
    /// Failed sign-ins per address and per account (`CONSOLE_LOGIN_ATTEMPTS` in `CONSOLE_LOGIN_WINDOW`).
    let limiter: LoginLimiter

    /// A page's outcome that is not the page: a redirect or a refusal with a code a person can act on.
    struct Refusal: Error {
        var status: HTTPResponse.Status
        var code: String
        var reason: String
        var headers: HTTPFields = [:]
    }

    func register(on router: Router<ConsoleRequestContext>) {
        router.get("/static/console.css") { _, _ in
            var headers: HTTPFields = [.contentType: "text/css; charset=utf-8"]
            ConsoleHeaders.apply(to: &headers)
            headers[.cacheControl] = "max-age=300"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: ConsoleTemplates.stylesheet)))
        }
        router.get("/login") { request, _ in await respond("login", request) { _ in try loginPage(request, error: nil, email: "") } }
        router.post("/login") { request, context in await respond("login", request) { _ in try await login(request, context) } }
        page(router, .post, "/logout", "logout") { request, _, session in
            try await checkCSRF(request, session)
            if let token = request.cookies[SessionCookie.name]?.value { try await store.closeSession(token: token) }
            throw Refusal(status: .seeOther, code: "signedOut", reason: "", headers: [.location: "/login", .setCookie: SessionCookie.cleared])
        }
        page(router, .get, "/", "home") { _, _, session in html("Home", "home", [:], session) }
        page(router, .get, "/search", "search") { request, _, session in try await search(request, session) }
        page(router, .get, "/apps/{bundleId}/subscriptions/{id}", "subscription") { request, context, session in
            try await subscriptionPage(request, bundle: try context.parameters.require("bundleId"), id: try context.parameters.require("id"), session, acted: nil)
        }
        page(router, .post, "/apps/{bundleId}/subscriptions/{id}", "subscription-action") { request, context, session in
            try await subscriptionAction(request, bundle: try context.parameters.require("bundleId"), id: try context.parameters.require("id"), session)
        }
        page(router, .get, "/apps/{bundleId}/customers/{customerId}", "customer") { request, context, session in
            try await customerPage(request, bundle: try context.parameters.require("bundleId"), customerId: try context.parameters.require("customerId"), session)
        }
        page(router, .post, "/apps/{bundleId}/customers/{customerId}/erase", "erase") { request, context, session in
            try await erase(request, bundle: try context.parameters.require("bundleId"), customerId: try context.parameters.require("customerId"), session)
        }
        page(router, .get, "/notifications/{uuid}", "notification") { request, context, session in
            try await notificationPage(request, uuid: try context.parameters.require("uuid"), session)
        }
        page(router, .get, "/dead-letters", "dead-letters") { request, _, session in try await deadLettersPage(request, session, acted: nil) }
        page(router, .post, "/dead-letters/redrive", "redrive") { request, _, session in try await redrive(request, session) }
        page(router, .get, "/audit", "audit") { request, _, session in try await auditPage(request, session) }
    }

    // MARK: - Plumbing

    /// A route that needs a session: without one (or an idle one), a GET goes to the login and a POST is refused.
    func page(
        _ router: Router<ConsoleRequestContext>, _ method: HTTPRequest.Method, _ path: RouterPath, _ name: String,
        _ body: @escaping @Sendable (Request, ConsoleRequestContext, OperatorSession) async throws -> Response
    ) {
        router.on(path, method: method) { request, context in
            await respond(name, request) { _ in
                guard let token = request.cookies[SessionCookie.name]?.value, let session = try await store.session(token: token, idle: configuration.sessionIdle, maximum: configuration.sessionMaximum) else {
                    if method == .get {
                        let next = request.uri.string
                        throw Refusal(status: .seeOther, code: "signIn", reason: "", headers: [.location: "/login?next=" + ConsolePaths.component(next)])
                    }
                    throw Refusal(status: .unauthorized, code: "noSession", reason: "Sign in first: this action needs a session.")
                }
                return try await body(request, context, session)
            }
        }
    }

    /// Runs a route: refusals become their answer; any other error is a 500 whose details stay in the log.
    func respond(_ route: String, _ request: Request, _ body: (Request) async throws -> Response) async -> Response {
        var response: Response
        if !configuration.allowHTTP, request.headers[HTTPField.Name("X-Forwarded-Proto")!]?.lowercased() != "https" {
            response = errorResponse(Refusal(status: .forbidden, code: "httpsRequired", reason: "The console is served over TLS only (CONSOLE_ALLOW_HTTP is not set)."))
        } else {
            do {
                response = try await body(request)
            } catch let refusal as Refusal {
                response = errorResponse(refusal)
            } catch {
                logger.error("console page failed", metadata: ["route": "\(route)", "error": "\(UntrustedText.escaped(String(reflecting: error), limit: 600))"])
                response = errorResponse(Refusal(status: .internalServerError, code: "internal", reason: "The page failed; the console's log has the cause."))
            }
        }
        ConsoleHeaders.apply(to: &response.headers)
        metrics.request(route: route, status: Int(response.status.code))
        return response
    }

    func errorResponse(_ refusal: Refusal) -> Response {
        var headers = refusal.headers
        if refusal.status.kind == .redirection { return Response(status: refusal.status, headers: headers) }
        headers[.contentType] = "text/html; charset=utf-8"
        let body = ConsoleTemplates.render("error", ["status": Int(refusal.status.code), "title": refusal.status.reasonPhrase, "code": refusal.code, "reason": refusal.reason])
        let page = ConsoleTemplates.render("layout", ["title": refusal.status.reasonPhrase, "body": body])
        return Response(status: refusal.status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page)))
    }

    func html(_ title: String, _ template: String, _ values: [String: Any], _ session: OperatorSession?, query: String = "", status: HTTPResponse.Status = .ok) -> Response {
        var values = values
        values["csrf"] = session?.csrfToken
        values["mayAct"] = session?.role.mayAct ?? false
        let body = ConsoleTemplates.render(template, values)
        var layout: [String: Any] = ["title": title, "body": body, "query": query]
        if let session {
            layout["operator"] = ["email": session.email, "role": session.role.rawValue, "csrf": session.csrfToken, "query": query] as [String: Any]
        }
        return Response(
            status: status, headers: [.contentType: "text/html; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: ConsoleTemplates.render("layout", layout))))
    }

    func form(_ request: Request) async throws -> FormBody {
        let buffer = try await request.body.collect(upTo: 256 * 1024)
        return FormBody(String(buffer: buffer))
    }

    func checkCSRF(_ request: Request, _ session: OperatorSession, form: FormBody? = nil) async throws {
        let body: FormBody
        if let form { body = form } else { body = try await self.form(request) }
        guard let token = body["csrf"], tokensEqual(token, session.csrfToken) else {
            throw Refusal(status: .forbidden, code: "csrf", reason: "The form's CSRF token is missing or not this session's: reload the page and try again.")
        }
    }

    /// The action's form after the CSRF check, the role check and the reason check.
    func actionForm(_ request: Request, _ session: OperatorSession, action: String) async throws -> (FormBody, String) {
        let body = try await form(request)
        try await checkCSRF(request, session, form: body)
        guard session.role.mayAct else {
            metrics.action(action, outcome: "forbidden")
            throw Refusal(status: .forbidden, code: "forbiddenRole", reason: "Your role (\(session.role.rawValue)) may look but not act: ask a support or admin operator.")
        }
        let reason = (body["reason"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !reason.isEmpty, reason.count <= 500 else {
            throw Refusal(status: .badRequest, code: "reasonRequired", reason: "Every action needs a reason (at most 500 characters): it is kept in the audit.")
        }
        return (body, reason)
    }

    // MARK: - Login

    func loginPage(_ request: Request, error: String?, email: String, status: HTTPResponse.Status = .ok) throws -> Response {
        let next = request.uri.queryParameters.get("next") ?? ""
        var values: [String: Any] = ["email": email, "next": Self.safeNext(next)]
        if let error { values["error"] = error }
        return html("Sign in", "login", values, nil, status: status)
    }

    /// Only a path of this origin: it starts with one `/` (not `//` or `/\\`, which browsers read as another host),
    /// and holds no backslash, space or control character (browsers drop a tab or a newline from a URL, so
    /// `/<TAB>/evil.example` would become `//evil.example`), at most 2 000 bytes.
    static func safeNext(_ next: String) -> String {
        let bytes = Array(next.utf8)
        guard bytes.count <= 2_000, bytes.first == UInt8(ascii: "/"), bytes.count == 1 || (bytes[1] != UInt8(ascii: "/") && bytes[1] != UInt8(ascii: "\\")),
            bytes.allSatisfy({ $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: "\\") })
        else { return "/" }
        return next
    }

    /// A sign-in form posted from another site is refused (login CSRF: signing a victim into an attacker's account):
    /// a browser's POST carries `Origin` (ours, thanks to `Referrer-Policy: same-origin`; `null` from a page that hides
    /// its own) and `Sec-Fetch-Site`; either naming anything but this origin is refused. A client that is no browser
    /// sends neither and is not a CSRF vector.
    func checkOrigin(_ request: Request) throws {
        if let site = request.headers[HTTPField.Name("Sec-Fetch-Site")!], !["same-origin", "none"].contains(site.lowercased()) {
            throw Refusal(status: .forbidden, code: "crossOrigin", reason: "This form was posted from another site (Sec-Fetch-Site \(UntrustedText.quoted(site, limit: 40))).")
        }
        guard let origin = request.headers[.origin] else { return }
        let host = request.headers[HTTPField.Name("X-Forwarded-Host")!].flatMap { configuration.trustForwardedFor || !configuration.trustedProxies.isEmpty ? $0 : nil }
            ?? request.head.authority ?? ""
        let accepted = ["http://" + host, "https://" + host]
        guard accepted.contains(origin.lowercased()) || accepted.contains(origin) else {
            throw Refusal(status: .forbidden, code: "crossOrigin", reason: "This form was posted from another site (Origin \(UntrustedText.quoted(origin, limit: 100))).")
        }
    }

    func login(_ request: Request, _ context: ConsoleRequestContext) async throws -> Response {
        try checkOrigin(request)
        let body = try await form(request)
        let email = String((body["email"] ?? "").trimmingCharacters(in: .whitespaces).lowercased().prefix(254))
        let password = body["password"] ?? ""
        let address = ClientAddress(trustedProxies: configuration.trustedProxies, trustForwardedFor: configuration.trustForwardedFor).resolve(
            peer: context.remoteAddress?.ipAddress, forwardedFor: request.headers[HTTPField.Name("X-Forwarded-For")!])
        let (addressKey, pairKey, accountKey) = ("address:" + address, "pair:\(email)|\(address)", "account:" + email)
        // The attempt takes its place before the password is checked: concurrent attempts count as they start.
        let ticket: LoginLimiter.Ticket
        switch limiter.begin(
            hard: [(addressKey, configuration.loginAttemptsPerAddress), (pairKey, configuration.loginAttempts)], delayed: (accountKey, configuration.loginAttempts))
        {
        case .success(let reserved): ticket = reserved
        case .failure(let wait):
            metrics.login("limited")
            throw Refusal(
                status: .tooManyRequests, code: "tooManyAttempts", reason: "Too many failed sign-ins from here or for this account: try again in \(wait.seconds) s.",
                headers: [.retryAfter: String(wait.seconds)])
        }
        var failed = true
        defer { limiter.finish(ticket, failed: failed, clearing: [pairKey, accountKey]) }
        let account = try await store.operatorAccount(email: email)
        // bcrypt on a thread of its own (≈ 0.2 s at cost 12): never on the event loop or the cooperative pool.
        let hash = account?.passwordHash ?? Self.decoyHash
        let matches = try await NIOThreadPool.singleton.runIfActive { Bcrypt.verify(password, hash: hash) }
        guard let account, matches, !account.disabled else {
            metrics.login("refused")
            logger.notice("console sign-in refused", metadata: ["account": "\(UntrustedText.quoted(email, limit: 100))"])
            return try loginPage(request, error: "Wrong email or password, or the account is disabled.", email: email, status: .unauthorized)
        }
        failed = false
        let (token, _) = try await store.openSession(operatorId: account.id)
        metrics.login("ok")
        logger.info("console sign-in", metadata: ["account": "\(account.email)", "role": "\(account.role.rawValue)"])
        return Response(status: .seeOther, headers: [.location: Self.safeNext(body["next"] ?? "/"), .setCookie: SessionCookie.set(token)])
    }

    /// Checked when the account does not exist, so an unknown email costs the same time as a wrong password.
    static let decoyHash = Bcrypt.hash(ConsoleStore.randomToken(), cost: 12)

    // MARK: - Pages

    func search(_ request: Request, _ session: OperatorSession) async throws -> Response {
        let query = request.uri.queryParameters.get("q") ?? ""
        let matches = Self.links(to: try await reading(request) { try await $0.search(query) })
        if matches.count == 1 {
            return Response(status: .seeOther, headers: [.location: matches[0].path])
        }
        return html("Search", "search", [
            "query": query, "matches": matches.map { ["kind": $0.kind, "label": $0.label, "path": $0.path] },
        ], session, query: query)
    }

    /// Where each search hit leads: a label for people and the console path of the match (built from stored
    /// identifiers only), one per destination (a transaction id and its subscription lead to the same page).
    static func links(to hits: [SearchHit]) -> [(kind: String, label: String, path: String)] {
        var matches: [(kind: String, label: String, path: String)] = []
        for hit in hits {
            let (kind, bundle, id, extra) = (hit.kind, hit.bundle, hit.id, hit.extra)
            switch kind {
            case "customer":
                guard let id else { continue }
                matches.append((kind, "customer \(id) of \(bundle)", ConsolePaths.customer(bundle: bundle, customerId: id)))
            case "notification", "dead letter":
                if let id, !bundle.isEmpty {
                    matches.append((kind, "\(kind) \(extra ?? "") of subscription \(id)", ConsolePaths.subscription(bundle: bundle, id: id)))
                } else if kind == "notification", let extra {
                    matches.append((kind, "notification \(extra)", ConsolePaths.notification(extra)))
                } else if let extra {
                    matches.append((kind, "dead letter \(extra)", "/dead-letters?q=" + ConsolePaths.component(extra)))
                }
            default:
                guard let id else { continue }
                let what = extra.map { "\(kind) \($0) of subscription \(id)" } ?? "subscription \(id) of \(bundle)"
                matches.append((kind, what, ConsolePaths.subscription(bundle: bundle, id: id)))
            }
        }
        var seen: Set<String> = []
        return matches.filter { seen.insert($0.path).inserted }.sorted { ($0.path, $0.kind) < ($1.path, $1.kind) }
    }

    func subscriptionPage(_ request: Request, bundle: String, id: String, _ session: OperatorSession, acted: String?) async throws -> Response {
        let rows = try await reading(request) { try await $0.subscription(bundleId: bundle, originalTransactionId: id) }.objectValue ?? JSONObject()
        var entitlements = (rows["entitlements"]?.arrayValue ?? []).map { Self.plain($0) as? [String: Any] ?? [:] }
        for index in entitlements.indices {
            if let owner = entitlements[index]["owner"] as? String { entitlements[index]["ownerPath"] = ConsolePaths.customer(bundle: bundle, customerId: owner) }
            if let renews = entitlements[index]["autoRenewStatus"] as? Int64 { entitlements[index]["autoRenewStatus"] = renews == 1 ? "auto-renew on" : "auto-renew off" }
        }
        var values: [String: Any] = [
            "id": id, "bundle": bundle, "entitlements": entitlements, "transactions": Self.plain(rows["transactions"] ?? .array([])),
            "actionPath": ConsolePaths.subscription(bundle: bundle, id: id),
        ]
        if let acted { values["acted"] = acted }
        if session.role.mayAct {
            let endpoints = try await reading(request) { try await $0.webhookEndpoints() }
            values["endpoints"] = endpoints.map { ["id": $0.id, "url": $0.url] }
            values["hasEndpoints"] = !endpoints.isEmpty
        }
        try await addTimeline(to: &values, request, bundle: bundle, subscriptions: [id], path: ConsolePaths.subscription(bundle: bundle, id: id))
        return html("Subscription \(id)", "subscription", values, session)
    }

    func customerPage(_ request: Request, bundle: String, customerId: String, _ session: OperatorSession) async throws -> Response {
        let subscriptions = try await reading(request) { try await $0.customerSubscriptions(bundleId: bundle, customerId: customerId) }
        let offers = try await reading(request) { try await $0.offerSignatures(bundleId: bundle, customerId: customerId) }
        var values: [String: Any] = [
            "customerId": customerId, "bundle": bundle, "hasOffers": !offers.isEmpty,
            "offers": offers.map { row -> [String: Any] in
                var values: [String: Any] = row
                values["redeemed"] = !(row["redeemedTransactionId"] ?? "").isEmpty
                return values
            },
            "subscriptions": subscriptions.map { ["id": $0, "path": ConsolePaths.subscription(bundle: bundle, id: $0)] },
            "mayErase": session.role == .admin && actions.erasureKey != nil,
            "erasePath": ConsolePaths.customer(bundle: bundle, customerId: customerId) + "/erase",
        ]
        try await addTimeline(to: &values, request, bundle: bundle, subscriptions: subscriptions, path: ConsolePaths.customer(bundle: bundle, customerId: customerId))
        return html("Customer \(customerId)", "customer", values, session)
    }

    func addTimeline(to values: inout [String: Any], _ request: Request, bundle: String, subscriptions: [String], path: String) async throws {
        let cursor = request.uri.queryParameters.get("before").flatMap(TimelineCursor.init)
        let limit = configuration.pageSize
        let page = try await reading(request) { try await $0.timeline(bundleId: bundle, subscriptions: subscriptions, before: cursor, limit: limit) }
        values["rows"] = page.rows.map { Self.timelineRow($0, traceURLTemplate: configuration.traceURLTemplate) }
        if let next = page.next { values["nextPath"] = path + "?before=" + ConsolePaths.component(next.text) }
    }

    /// A timeline row as its template shows it.
    static func timelineRow(_ row: JSONValue, traceURLTemplate: String? = nil) -> [String: Any] {
        var values = plain(row) as? [String: Any] ?? [:]
        // The trace id is ours (32 hex digits, written by the worker), never attacker text; the link is built only
        // from that shape.
        if let traceId = values["traceId"] as? String, TraceParent.isTraceId(traceId) {
            values["traceURL"] = traceURLTemplate?.replacingOccurrences(of: "{traceId}", with: traceId)
        } else {
            values["traceId"] = nil
        }
        let kind = values["kind"] as? String ?? ""
        values["isNotification"] = ["notification", "purchase", "snapshot"].contains(kind)
        values["isEvent"] = kind == "event"
        values["isAction"] = kind == "action"
        let deliveries = values["deliveries"] as? Int64 ?? 1
        values["plural"] = deliveries != 1
        values["repeated"] = (values["firstReceived"] as? String) != (values["lastReceived"] as? String)
        let outcome = values["outcome"] as? String ?? ""
        values["outcomeClass"] = outcome
        if outcome != "dead-lettered", let uuid = values["uuid"] as? String { values["detailPath"] = ConsolePaths.notification(uuid) }
        return values
    }

    func notificationPage(_ request: Request, uuid: String, _ session: OperatorSession) async throws -> Response {
        guard let row = try await reading(request, { try await $0.notification(uuid: uuid) }).objectValue else {
            throw Refusal(status: .notFound, code: "notFound", reason: "No stored notification has this notificationUUID (a dead-lettered one is under Dead letters).")
        }
        var values = Self.plain(.object(row)) as? [String: Any] ?? [:]
        if let bundle = row["bundleId"]?.stringValue, let subscription = row["subscription"]?.stringValue {
            values["subscriptionPath"] = ConsolePaths.subscription(bundle: bundle, id: subscription)
        }
        let signed = row["signedPayload"]?.stringValue ?? ""
        let signedDate = row["signedDate"]?.stringValue.flatMap(Self.date)
        values["chain"] = Self.chain(of: signed, at: signedDate)
        var nested: [[String: Any]] = []
        if let outer = UnverifiedPeek.payload(of: signed), let data = outer["data"]?.objectValue {
            for (name, title) in [("signedTransactionInfo", "Transaction (signedTransactionInfo)"), ("signedRenewalInfo", "Renewal (signedRenewalInfo)")] {
                if let jws = data[name]?.stringValue, let decoded = UnverifiedPeek.payload(of: jws) {
                    nested.append(["name": title, "json": Self.pretty(.object(decoded))])
                }
            }
        }
        values["nested"] = nested
        return html("Notification \(uuid)", "notification", values, session)
    }

    func deadLettersPage(_ request: Request, _ session: OperatorSession, acted: String?) async throws -> Response {
        let parameters = request.uri.queryParameters
        func nonEmpty(_ name: String) -> String? { parameters.get(name).flatMap { $0.isEmpty ? nil : $0 } }
        let since = nonEmpty("since").flatMap { Self.date($0 + "T00:00:00.000Z") }
        let (code, app, term) = (nonEmpty("code"), nonEmpty("app"), nonEmpty("q"))
        let result = try await reading(request) { try await $0.deadLetters(code: code, bundleId: app, since: since, term: term, limit: Self.deadLettersPerPage) }
        let object = result.objectValue ?? JSONObject()
        // Each payload also decoded, unverified (a forger wrote it: shown as text, like everything else). What one page
        // renders is bounded: 50 rows, each payload and its decoding cut at `payloadExcerpt` bytes (a dead letter may
        // hold 64 KiB of anyone's text).
        var rows = (Self.plain(object["rows"] ?? .array([])) as? [Any] ?? []).compactMap { $0 as? [String: Any] }
        for index in rows.indices {
            guard let payload = rows[index]["payload"] as? String else { continue }
            if let decoded = UnverifiedPeek.payload(of: payload) { rows[index]["decoded"] = Self.excerpt(Self.pretty(.object(decoded))) }
            rows[index]["payload"] = Self.excerpt(payload)
        }
        var values: [String: Any] = [
            "rows": rows, "codes": Self.plain(object["codes"] ?? .array([])),
            "code": nonEmpty("code") ?? "", "app": nonEmpty("app") ?? "", "since": nonEmpty("since") ?? "", "q": nonEmpty("q") ?? "",
        ]
        if let acted { values["acted"] = acted }
        return html("Dead letters", "deadLetters", values, session)
    }

    static let deadLettersPerPage = 50
    static let payloadExcerpt = 2_048

    /// At most `payloadExcerpt` bytes of `text` (on a character boundary), saying how much was left out.
    static func excerpt(_ text: String) -> String {
        guard text.utf8.count > payloadExcerpt else { return text }
        var cut = text.utf8.prefix(payloadExcerpt)
        while String(cut) == nil { cut = cut.dropLast() }
        return String(cut)! + "… (\(text.utf8.count - cut.count) more bytes; pipelinectl dlq list --json shows it whole)"
    }

    func auditPage(_ request: Request, _ session: OperatorSession) async throws -> Response {
        let cursor = request.uri.queryParameters.get("before").flatMap { Int64($0) }
        let rows = (try await reading(request) { try await $0.auditLog(before: cursor, limit: 100) }).arrayValue ?? []
        let next = rows.count == 100 ? rows.last?.objectValue?["id"]?.int64Value.map { "/audit?before=\($0)" } : nil
        var values: [String: Any] = ["rows": Self.plain(.array(rows))]
        if let next { values["nextPath"] = next }
        return html("Audit", "audit", values, session)
    }

    // MARK: - Reads and read-your-writes

    /// Runs a page's reads (`body` only reads) through the router, after the newest token this request knows: the
    /// action's own (`ConsoleReadToken.current`), a `Consistency-Token` header, or the cookie an action set for
    /// `POSTGRES_READ_STICKY`. So the page an action answers with, and the pages the operator opens next, show it.
    func reading<T: Sendable>(_ request: Request, _ body: @escaping @Sendable (ConsoleStore) async throws -> T) async throws -> T {
        let tokens = [
            ConsoleReadToken.current, request.headers[ConsoleReadToken.header].flatMap { ConsistencyToken($0) },
            request.cookies[ConsoleReadToken.cookie].flatMap { ConsistencyToken($0.value) },
        ]
        let logger = logger
        // A page may scan more than an API read: 5 s before a replica that does not answer is given up for the primary.
        return try await reads.read(after: tokens.compactMap { $0 }.max(), timeout: .seconds(5)) { client in
            try await body(ConsoleStore(client: client, logger: logger))
        }
    }

    /// Renders an action's answer after its writes: the primary's position now is the action's token; the page's
    /// reads carry it, and the answer hands it on (`Consistency-Token`, and a cookie for `POSTGRES_READ_STICKY`).
    func afterWrite(_ render: () async throws -> Response) async throws -> Response {
        let token = try await reads.currentToken()
        var response = try await ConsoleReadToken.$current.withValue(token) { try await render() }
        response.headers[ConsoleReadToken.header] = token.description
        let seconds = reads.settings.sticky.components.seconds
        if seconds > 0 { response.headers.append(HTTPField(name: .setCookie, value: ConsoleReadToken.setCookie(token, seconds: seconds))) }
        return response
    }

    // MARK: - Values for templates

    /// JSON as the template engine reads it: dictionaries, arrays, strings, numbers, booleans (null dropped).
    static func plain(_ value: JSONValue) -> Any {
        switch value {
        case .null: return ""
        case .bool(let flag): return flag
        case .number(let number): return number.int64Value.map { $0 as Any } ?? number.description
        case .string(let text): return text
        case .array(let elements): return elements.map(plain)
        case .object(let object):
            var result: [String: Any] = [:]
            for member in object where member.value != .null { result[member.key] = plain(member.value) }
            return result
        }
    }

    static func pretty(_ value: JSONValue) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(value.serialized.utf8)),
            let data = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        else { return value.serialized }
        return String(decoding: data, as: UTF8.self)
    }

    static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }

    /// The x5c chain of a stored JWS: each certificate's subject and validity, and whether it was valid at signedDate.
    static func chain(of jws: String, at signedDate: Date?) -> [[String: Any]] {
        guard let dot = jws.firstIndex(of: "."), let header = Base64.decode(jws[..<dot], alphabet: .url),
            case .object(let object)? = try? StrictJSONParser().parse(header), case .array(let certificates)? = object["x5c"]
        else { return [] }
        let names = ["leaf", "intermediate", "root"]
        return certificates.enumerated().compactMap { index, element in
            guard let text = element.stringValue, let der = Data(base64Encoded: text), let certificate = try? Certificate(derEncoded: Array(der)) else { return nil }
            let valid = signedDate.map { certificate.notValidBefore <= $0 && $0 <= certificate.notValidAfter }
            return [
                "position": index < names.count ? names[index] : "certificate \(index + 1)", "subject": certificate.subject.description,
                "notBefore": certificate.notValidBefore.formatted(.iso8601), "notAfter": certificate.notValidAfter.formatted(.iso8601),
                "verdict": valid.map { $0 ? "valid" : "outside its validity" } ?? "unknown",
            ]
        }
    }
}
