import AppStoreNotifications
import CustomerAPI
import Foundation
import KafkaClient
import PipelineOperations
import ServiceRuntime
import PostgresNIO
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
import PipelineTestSupport
import TestGates
#endif

/// A worker, the fake Apple and a `customer-api` process over one database and topic: the app backend's view.
final class CustomerAPIScene: @unchecked Sendable {
    let scene: BackfillScene
    var api: Process?
    var port = 0
    var opsPort = 0
    var fixture: WorkerProcessFixture { scene.fixture }
    var minter: NotificationMinter { scene.fixture.minter }
    var bundleId: String { minter.bundleId }
    let binary = repositoryRoot.appendingPathComponent(".build/debug/customer-api").path

    init(bootstrap: String, postgresURL: String, workerEnvironment: [String: String] = [:]) async throws {
        scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, workerEnvironment: workerEnvironment)
        // The worker's migration may still run when its ops port listens: migrate (under the same advisory lock)
        // before the first pipelinectl call.
        let migrated = try await scene.run(["migrate"])
        #expect(migrated.status == 0, "\(migrated.output)")
    }

    /// Starts (or restarts) `customer-api` under `policy`; `withAppleKey` gives it the fake Apple's key.
    func startAPI(policy: String = "transfer", withAppleKey: Bool = true, extra: [String: String] = [:]) async throws {
        if let api { await ChildProcess.terminate(api) }
        port = TestServices.freePort()
        opsPort = TestServices.freePort()
        var environment = withAppleKey ? scene.apple.environment(keyFile: scene.keyFile) : [:]
        environment.merge([
            "KAFKA_BOOTSTRAP_SERVERS": fixture.bootstrap, "NOTIFICATIONS_TOPIC": fixture.topic, "POSTGRES_URL": scene.database,
            "APPS": WorkerProcessFixture.apps, "TRUSTED_ROOTS": fixture.rootFile, "CUSTOMER_API_HOST": "127.0.0.1", "CUSTOMER_API_PORT": String(port),
            "CUSTOMER_API_OPS_PORT": String(opsPort), "OWNERSHIP_POLICY": policy, "CUSTOMER_API_APPLY_TIMEOUT_MS": "10000",
        ]) { _, new in new }
        environment.merge(extra) { _, new in new }
        api = try await ChildProcess.start(binary: binary, environment: environment, logFile: fixture.directory + "/customer-api.log", listeningOn: port)
        #expect(api?.isRunning == true, "customer-api did not start: \(fixture.logTail())")
    }

    /// A new key's secret (`pipelinectl api-keys create --json`).
    func key(scope: String = "write", bundleIds: [String] = []) async throws -> (id: String, secret: String) {
        let created = try await run(["api-keys", "create", "--name", "test", "--scope", scope, "--json"] + bundleIds.flatMap { ["--bundle-id", $0] })
        #expect(created.status == 0, "\(created.output)")
        let json = try StrictJSONParser().parseObject(Array((created.output.split(separator: "\n").last.map(String.init) ?? "").utf8))
        return (try #require(json["id"]?.stringValue), try #require(json["secret"]?.stringValue))
    }

    func request(_ method: String, _ path: String, key: String?, body: JSONObject? = nil) async throws -> (status: Int, json: JSONObject, headers: [String: String]) {
        var headers: [String: String] = [:]
        if let key { headers["Authorization"] = "Bearer " + key }
        if body != nil { headers["Content-Type"] = "application/json" }
        let response = try await HTTPTestConnection(port: port).send(method: method, path: path, headers: headers, body: Array((body?.serialized ?? "").utf8))
        return (response.status, (try? StrictJSONParser().parseObject(response.body)) ?? JSONObject([:]), response.headers)
    }

    /// The JWSs StoreKit would hand the app for `event` (signed once per transaction, as an app reposts the same
    /// `jwsRepresentation`; ECDSA signatures differ at every signing).
    private var signed: [String: (transaction: String, renewal: String)] = [:]

    /// Posts `event`'s signed transaction (and renewal info) for `customer`.
    func purchase(_ event: NotificationMinter.SubscriptionEvent, customer: String, key: String) async throws -> (status: Int, json: JSONObject, headers: [String: String]) {
        let jws = signed[event.transactionId] ?? (minter.chain.sign(minter.transaction(event)), minter.chain.sign(minter.renewalInfo(event)))
        signed[event.transactionId] = jws
        var body = JSONObject(["customerId": .string(customer), "signedTransaction": .string(jws.transaction)])
        if event.productType == "Auto-Renewable Subscription" { body["signedRenewalInfo"] = .string(jws.renewal) }
        return try await request("POST", "/v1/apps/\(bundleId)/purchases", key: key, body: body)
    }

    func run(_ arguments: [String]) async throws -> (status: Int32, output: String) { try await scene.run(arguments) }

    func query<T: Sendable & PostgresDecodable>(_ sql: String, as type: T.Type) async throws -> [T] { try await scene.query(sql, as: type) }

    /// The events of the scene's events topic about `subject`.
    func events(subject: String) async throws -> [ReadEvent] {
        try await TopicReader.readAll(fixture.eventsTopic(), client: KafkaClientConfiguration(bootstrapServers: [fixture.bootstrap]), logger: ingestTestLogger)
            .compactMap(ReadEvent.init).filter { $0.subject == subject }
    }

    func finish() async {
        if let api { await ChildProcess.terminate(api) }
        await scene.finish()
    }
}

/// A subscription period open now: bought a minute ago, ending in 30 days.
func currentPeriod(seed: Int, token: String, type: String = "SUBSCRIBED") -> NotificationMinter.SubscriptionEvent {
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    var event = NotificationMinter.SubscriptionEvent.sample(seed: seed * 4, signedDate: now - 60_000, type: type)
    event.purchaseDate = now - 60_000
    event.expiresDate = now + 30 * 86_400_000
    event.appAccountToken = token
    return event
}

@Suite(
    "Customer API: purchases, ownership and lookups through customer-api, worker, broker and PostgreSQL", .serialized,
    .requiresKafkaAndPostgres)
struct CustomerAPIProcessTests: ProcessSuite {
    @Test("a purchase is read back at once; posting it again answers the same; Apple's notification for it then changes nothing and makes no event")
    func purchaseThenRead() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI()
        let key = try await scene.key().secret
        let customer = UUID().uuidString.lowercased()
        let event = currentPeriod(seed: 11, token: customer)

        // 200 (not 202) means the worker applied it within CUSTOMER_API_APPLY_TIMEOUT_MS.
        let first = try await scene.purchase(event, customer: customer, key: key)
        #expect(first.status == 200, "\(first.json.serialized) \(scene.fixture.logTail())")
        #expect(first.json["purchase"]?.objectValue?["ownership"] == .string("owned"))
        let subscriptions = first.json["customer"]?.objectValue?["subscriptions"]?.arrayValue ?? []
        #expect(subscriptions.count == 1)
        #expect(subscriptions.first?.objectValue?["originalTransactionId"] == .string(event.originalTransactionId))
        #expect(subscriptions.first?.objectValue?["isActive"] == .bool(true) && subscriptions.first?.objectValue?["status"] == .string("active"))
        #expect(first.json["customer"]?.objectValue?["hasActiveAccess"] == .bool(true))

        let again = try await scene.purchase(event, customer: customer, key: key)
        #expect(again.status == 200 && again.json["purchase"] == first.json["purchase"], "the same purchase twice: the same answer")
        #expect(try await scene.query("SELECT count(*)::int FROM customer_purchases", as: Int.self) == [1])

        let read = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(customer)", key: key)
        #expect(read.status == 200 && read.json["subscriptions"] == first.json["customer"]?.objectValue?["subscriptions"])
        let bySubscription = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/subscriptions/\(event.originalTransactionId)", key: key)
        #expect(bySubscription.status == 200 && bySubscription.json["subscriptions"]?.arrayValue?.count == 1)
        let byTransaction = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/transactions/\(event.transactionId)", key: key)
        #expect(byTransaction.status == 200 && byTransaction.json["customerId"] == .string(customer), "\(byTransaction.json.serialized)")
        let eventsBefore = try await scene.events(subject: event.originalTransactionId)
        #expect(eventsBefore.map(\.type) == ["entitlement.granted"], "\(eventsBefore.map(\.type))")
        #expect(eventsBefore.first?.data["cause"]?.objectValue?["kind"] == .string("purchase"))

        // Apple's SUBSCRIBED for the same transaction, through the topic: forward-only, no second grant, no event.
        // What a backend reads (the decisive columns, the event count) and who owns it stay; Apple's own status and
        // the last-notification bookkeeping may move forward.
        let decisive = """
            SELECT concat_ws('|', status, expires_at, product_id, auto_renew_status, auto_renew_product_id, grace_period_expires_at, revocation_date,
                superseded_by, event_sequence, (SELECT string_agg(customer_id, ',') FROM customer_ownership)) FROM entitlements
            """
        let rowBefore = try await scene.query(decisive, as: String.self)
        try await scene.fixture.produce([scene.minter.signedNotification(event)])
        #expect(try await scene.fixture.waitForLag(group: scene.scene.group))
        let rowAfter = try await scene.query(decisive, as: String.self)
        #expect(rowAfter == rowBefore && rowBefore.count == 1, "the notification after the purchase changed the row")
        try await Task.sleep(for: .seconds(1))  // the relay runs every 50 ms: an event would be on the topic by now
        let eventsAfter = try await scene.events(subject: event.originalTransactionId)
        #expect(eventsAfter.map(\.id) == eventsBefore.map(\.id), "the notification made an event: \(eventsAfter.map(\.type))")
        let metrics = try await HTTPTestConnection(port: scene.opsPort).send(method: "GET", path: "/metrics")
        #expect(metrics.bodyText.contains("customer_api_requests_total{route=\"postPurchase\",status=\"200\"} 2"), "\(metrics.bodyText.prefix(2000))")
        #expect(metrics.bodyText.contains("customer_api_purchase_apply_duration"))
        await scene.finish()
    }

    @Test("unknown key ids cost their address, before any query: a flood of random ids from one address is 429 past the burst (answers from memory); a key that authenticated before is not slowed")
    func unknownKeysLimitedPerAddress() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI(extra: ["CUSTOMER_API_AUTH_ATTEMPTS": "0.5", "CUSTOMER_API_AUTH_BURST": "20"])
        let reader = try await scene.key(scope: "read")
        let path = "/v1/apps/\(scene.bundleId)/customers/\(UUID().uuidString.lowercased())"
        #expect(try await scene.request("GET", path, key: reader.secret).status == 200, "the good key authenticates once")
        let flooded = ContinuousClock.now
        let statuses = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<200 {
                group.addTask {
                    let id = (0..<12).map { _ in "0123456789abcdef".randomElement()! }
                    let random = "ak_key_\(String(id))_" + String(repeating: "A", count: 43)
                    return (try? await scene.request("GET", path, key: random).status) ?? 0
                }
            }
            var all: [Int] = []
            for await status in group { all.append(status) }
            return all
        }
        // The burst, plus what the bucket refilled while the flood lasted (half a token a second): however slow the
        // machine, the bound follows from the configuration and the elapsed time, not from a guess at the speed.
        let elapsed = ContinuousClock.now - flooded
        let allowed = 20 + Int((Double(elapsed.components.seconds) + 1) * 0.5) + 1
        let unauthorized = statuses.filter { $0 == 401 }.count
        #expect(unauthorized >= 20 && unauthorized <= allowed, "\(unauthorized) checked, \(allowed) allowed in \(elapsed): \(Dictionary(grouping: statuses, by: { $0 }).mapValues(\.count))")
        #expect(statuses.filter { $0 == 429 }.count == 200 - unauthorized, "\(Dictionary(grouping: statuses, by: { $0 }).mapValues(\.count))")
        #expect(try await scene.request("GET", path, key: reader.secret).status == 200, "a known key from the same address is not limited by the flood")
        await scene.finish()
    }

    @Test("refusals: 401 without, with an unknown and with a revoked key (within a second); 403 for another app's key and a read key's POST; 400 for a bare id or a customerId not a UUID; 422 with the verifier's code; 404 for an unknown id; 408 for a slow client")
    func refusals() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI(extra: ["CUSTOMER_API_REQUEST_TIMEOUT_MS": "1000"])
        let writer = try await scene.key()
        let reader = try await scene.key(scope: "read")
        let otherApp = try await scene.key(bundleIds: ["com.example.other"])
        let customer = UUID().uuidString.lowercased()
        let event = currentPeriod(seed: 21, token: customer)
        let path = "/v1/apps/\(scene.bundleId)/customers/\(customer)"

        func code(_ answer: (status: Int, json: JSONObject, headers: [String: String])) -> String {
            "\(answer.status) " + (answer.json["error"]?.objectValue?["code"]?.stringValue ?? answer.json.serialized)
        }
        #expect(code(try await scene.request("GET", path, key: nil)) == "401 unauthorized")
        #expect(code(try await scene.request("GET", path, key: "ak_key_0123456789ab_" + String(repeating: "A", count: 43))) == "401 unauthorized")
        #expect(code(try await scene.request("GET", path, key: "not-a-key")) == "401 unauthorized")
        #expect(code(try await scene.request("GET", path, key: otherApp.secret)) == "403 forbidden_bundle")
        #expect(code(try await scene.purchase(event, customer: customer, key: reader.secret)) == "403 insufficient_scope")
        // No tenant oracle: an app that does not exist answers exactly as one the key does not see.
        let unknownApp = try await scene.request("GET", "/v1/apps/com.example.unknown/customers/\(customer)", key: otherApp.secret)
        let invisibleApp = try await scene.request("GET", path, key: otherApp.secret)
        #expect(code(unknownApp) == "403 forbidden_bundle" && unknownApp.json == invisibleApp.json, "\(unknownApp.json.serialized) / \(invisibleApp.json.serialized)")
        #expect(code(try await scene.request("GET", "/v1/apps/com.example.unknown/customers/\(customer)", key: writer.secret)) == "403 forbidden_bundle")
        let bare = try await scene.request("POST", "/v1/apps/\(scene.bundleId)/purchases", key: writer.secret, body: JSONObject([
            "customerId": .string(customer), "signedTransaction": .string(event.transactionId),
        ]))
        #expect(code(bare) == "400 bare_transaction_id" && (bare.json["error"]?.objectValue?["message"]?.stringValue ?? "").contains("jwsRepresentation"))
        #expect(code(try await scene.purchase(event, customer: "user-42", key: writer.secret)) == "400 invalid_customer_id")
        #expect(code(try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/user-42", key: reader.secret)) == "400 invalid_customer_id")
        #expect(code(try await scene.request("POST", "/v1/apps/\(scene.bundleId)/purchases", key: writer.secret, body: JSONObject(["customerId": .string(customer)]))) == "400 invalid_request")

        // Signed by another (untrusted) chain; for another app; not a JWS at all.
        let stranger = NotificationMinter(chain: try TestCertificateAuthority().issueChain())
        let forged = try await scene.request("POST", "/v1/apps/\(scene.bundleId)/purchases", key: writer.secret, body: JSONObject([
            "customerId": .string(customer), "signedTransaction": .string(stranger.chain.sign(stranger.transaction(event))),
        ]))
        #expect(code(forged) == "422 invalidChain", "\(forged.json.serialized)")
        let otherBundle = NotificationMinter(chain: scene.minter.chain, bundleId: "com.example.other")
        let crossApp = try await scene.request("POST", "/v1/apps/\(scene.bundleId)/purchases", key: writer.secret, body: JSONObject([
            "customerId": .string(customer), "signedTransaction": .string(otherBundle.chain.sign(otherBundle.transaction(event))),
        ]))
        #expect(code(crossApp) == "422 bundleIdMismatch", "\(crossApp.json.serialized)")
        let garbage = try await scene.request("POST", "/v1/apps/\(scene.bundleId)/purchases", key: writer.secret, body: JSONObject([
            "customerId": .string(customer), "signedTransaction": .string("eyJhbGciOiJub25lIn0.e30.\u{1b}[31m"),
        ]))
        #expect(garbage.status == 422 && !(garbage.json.serialized.contains("\u{1b}")), "\(garbage.json.serialized)")
        #expect(try await scene.query("SELECT count(*)::int FROM customer_purchases", as: Int.self) == [0], "nothing refused was recorded")

        #expect(code(try await scene.request("GET", "/v1/apps/\(scene.bundleId)/subscriptions/999", key: reader.secret)) == "404 not_found")
        #expect(code(try await scene.request("GET", "/v1/apps/\(scene.bundleId)/transactions/999", key: reader.secret)) == "404 not_found")
        let empty = try await scene.request("GET", path, key: reader.secret)
        #expect(empty.status == 200 && empty.json["subscriptions"] == .array([]) && empty.json["oneTimePurchases"] == .array([]))

        // Revoked while in use: refused within a second.
        #expect(try await scene.request("GET", path, key: reader.secret).status == 200)
        #expect(try await scene.run(["api-keys", "revoke", "--id", reader.id]).status == 0)
        try await Task.sleep(for: .seconds(1))
        #expect(code(try await scene.request("GET", path, key: reader.secret)) == "401 unauthorized")

        // A slow client: the head trickles in, the deadline cuts it off with 408.
        let connection = try RawConnection(port: scene.port)
        let head = Array("GET \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(writer.secret)\r\nX-Padding: aaaaaaaaaaaaaaaa\r\n".utf8)
        var sent = 0
        while sent < head.count, connection.send([head[sent]]) {
            sent += 1
            try await Task.sleep(for: .milliseconds(100))
        }
        let answer = await connection.readUntilClosed(seconds: 5)
        #expect(answer.closed && answer.text.hasPrefix("HTTP/1.1 408") && answer.text.contains("request_timeout"), "\(answer.text)")
        #expect(sent < head.count, "cut off after \(sent) of \(head.count) bytes")
        await scene.finish()
    }

    @Test("ownership: keep answers 409, transfer moves the purchase (a transfers row, an entitlement.transferred event, Apple told the new owner), transfer-if-inactive moves only from an owner without access; Apple's later notification does not move it back")
    func ownershipPolicies() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI(policy: "keep")
        let key = try await scene.key().secret
        let alice = UUID().uuidString.lowercased(), bob = UUID().uuidString.lowercased()
        let event = currentPeriod(seed: 31, token: alice)

        #expect(try await scene.purchase(event, customer: alice, key: key).status == 200)
        let kept = try await scene.purchase(event, customer: bob, key: key)
        #expect(kept.status == 409 && kept.json["error"]?.objectValue?["code"] == .string("owned_by_another_customer"), "\(kept.json.serialized)")
        #expect(!kept.json.serialized.contains(alice), "the current owner is not named")

        try await scene.startAPI(policy: "transfer")
        let moved = try await scene.purchase(event, customer: bob, key: key)
        #expect(moved.status == 200 && moved.json["purchase"]?.objectValue?["ownership"] == .string("transferred"), "\(moved.json.serialized)")
        #expect(moved.json["customer"]?.objectValue?["subscriptions"]?.arrayValue?.count == 1)
        let aliceNow = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(alice)", key: key)
        #expect(aliceNow.json["subscriptions"] == .array([]), "the purchase left its old owner")
        #expect(try await scene.query("SELECT from_customer_id || '>' || to_customer_id FROM customer_transfers", as: String.self) == ["\(alice)>\(bob)"])
        #expect(scene.scene.apple.fake.appAccountTokenCalls.map { "\($0.originalTransactionId)=\($0.appAccountToken)" } == ["\(event.originalTransactionId)=\(bob)"])
        try await Task.sleep(for: .seconds(1))
        let events = try await scene.events(subject: event.originalTransactionId)
        #expect(events.map(\.type) == ["entitlement.granted", "entitlement.transferred"], "\(events.map(\.type))")
        #expect(events.map(\.sequence) == [1, 2])
        #expect(events.last?.data["transfer"] == .object(JSONObject(["fromCustomerId": .string(alice), "toCustomerId": .string(bob)])))
        #expect(events.last?.before == events.first?.after && events.last?.after == events.first?.after, "a transfer changes the owner, not the access")

        // Apple's renewal still carries Alice's token: the subscription stays Bob's.
        var renewal = event
        renewal.notificationType = "DID_RENEW"
        renewal.notificationUUID = UUID().uuidString.lowercased()
        renewal.transactionId = String(Int64(event.transactionId)! + 1)
        renewal.signedDate += 1_000
        renewal.expiresDate += 30 * 86_400_000
        try await scene.fixture.produce([scene.minter.signedNotification(renewal)])
        #expect(try await scene.fixture.waitForLag(group: scene.scene.group))
        let bobNow = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(bob)", key: key)
        #expect(bobNow.json["subscriptions"]?.arrayValue?.first?.objectValue?["expiresAt"] != nil && bobNow.json["hasActiveAccess"] == .bool(true), "\(bobNow.json.serialized)")
        #expect(try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(alice)", key: key).json["subscriptions"] == .array([]))

        // Alice posts her first claim again (same bytes, same policy): the purchase is Bob's today, so 409, not her
        // first answer (200) from the record.
        try await scene.startAPI(policy: "keep")
        let again = try await scene.purchase(event, customer: alice, key: key)
        #expect(again.status == 409 && !again.json.serialized.contains(bob), "\(again.status) \(again.json.serialized)")

        // transfer-if-inactive: Bob has access, so Carol is refused; an expired subscription of Dave's moves to Carol.
        try await scene.startAPI(policy: "transfer-if-inactive")
        let carol = UUID().uuidString.lowercased(), dave = UUID().uuidString.lowercased()
        #expect(try await scene.purchase(event, customer: carol, key: key).status == 409)
        var lapsed = NotificationMinter.SubscriptionEvent.sample(seed: 32 * 4, signedDate: Int64(Date().timeIntervalSince1970 * 1000) - 40 * 86_400_000, type: "SUBSCRIBED")
        lapsed.appAccountToken = dave
        #expect(try await scene.purchase(lapsed, customer: dave, key: key).status == 200)
        let taken = try await scene.purchase(lapsed, customer: carol, key: key)
        #expect(taken.status == 200 && taken.json["purchase"]?.objectValue?["ownership"] == .string("transferred"), "\(taken.json.serialized)")
        await scene.finish()
    }

    @Test("no appAccountToken: the purchase is bound to the customer and Apple is told (Set App Account Token); a family-shared one is bound and Apple is not called; an order id is looked up at Apple; a one-time purchase")
    func untokenedPurchases() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI()
        let key = try await scene.key().secret
        let customer = UUID().uuidString.lowercased(), member = UUID().uuidString.lowercased()
        let offerCode = currentPeriod(seed: 41, token: "")
        let bound = try await scene.purchase(offerCode, customer: customer, key: key)
        #expect(bound.status == 200 && bound.json["purchase"]?.objectValue?["ownership"] == .string("bound"), "\(bound.json.serialized)")
        #expect(scene.scene.apple.fake.appAccountTokenCalls.map { "\($0.originalTransactionId)=\($0.appAccountToken)" } == ["\(offerCode.originalTransactionId)=\(customer)"])

        var family = currentPeriod(seed: 42, token: "")
        family.inAppOwnershipType = "FAMILY_SHARED"
        let shared = try await scene.purchase(family, customer: member, key: key)
        #expect(shared.status == 200 && shared.json["purchase"]?.objectValue?["ownership"] == .string("bound"), "\(shared.json.serialized)")
        #expect(scene.scene.apple.fake.appAccountTokenCalls.count == 1, "a family-shared transaction was sent to Set App Account Token")
        #expect(try await scene.query("SELECT apple_token_status FROM customer_ownership ORDER BY original_transaction_id", as: String.self) == ["set", "family-shared"])

        // Look Up Order ID (Production, with a key): Apple's signed transactions of the order, verified, answered
        // from our rows; an order Apple does not know is 404.
        scene.scene.apple.fake.setOrder("MQ7K2XLV9P", signedTransactions: [scene.minter.chain.sign(scene.minter.transaction(offerCode))])
        let order = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/orders/MQ7K2XLV9P", key: key)
        let ordered = order.json["transactions"]?.arrayValue?.first?.objectValue
        #expect(order.status == 200 && ordered?["transactionId"] == .string(offerCode.transactionId) && ordered?["customerId"] == .string(customer), "\(order.json.serialized)")
        let unknownOrder = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/orders/NOSUCHORDER", key: key)
        #expect(unknownOrder.status == 404 && unknownOrder.json["error"]?.objectValue?["code"] == .string("not_found"), "\(unknownOrder.json.serialized)")

        // A one-time purchase: in the customer's oneTimePurchases, active.
        var lifetime = currentPeriod(seed: 43, token: customer)
        lifetime.productType = "Non-Consumable"
        lifetime.productId = "com.example.pipeline.lifetime"
        let oneTime = try await scene.purchase(lifetime, customer: customer, key: key)
        #expect(oneTime.status == 200, "\(oneTime.json.serialized)")
        let purchases = oneTime.json["customer"]?.objectValue?["oneTimePurchases"]?.arrayValue ?? []
        #expect(purchases.count == 1 && purchases.first?.objectValue?["isActive"] == .bool(true), "\(oneTime.json.serialized)")
        await scene.finish()
    }

    @Test("two customers claim one transaction while no worker runs: each Location answers its own claim and never names the other; the transaction route answers only the named customer")
    func claimLocations() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI(extra: ["CUSTOMER_API_APPLY_TIMEOUT_MS": "500", "CUSTOMER_API_APPLE_TOKEN_RETRY_MS": "600000"])
        let key = try await scene.key().secret
        await scene.fixture.stopOneByOne(scene.scene.workers)
        let alice = UUID().uuidString.lowercased(), bob = UUID().uuidString.lowercased()
        let event = currentPeriod(seed: 61, token: alice)
        let first = try await scene.purchase(event, customer: alice, key: key)
        let second = try await scene.purchase(event, customer: bob, key: key)
        let aliceLocation = first.headers["location"] ?? "", bobLocation = second.headers["location"] ?? ""
        #expect(first.status == 202 && second.status == 202 && aliceLocation != bobLocation && aliceLocation.contains("/purchases/claims/"), "\(first.headers) \(second.headers)")

        let (worker, _) = try await scene.fixture.startWorker(group: scene.scene.group, postgresURL: scene.scene.database)
        scene.scene.workers = [worker]
        var answers: [(status: Int, json: JSONObject, headers: [String: String])] = []
        let deadline = ContinuousClock.now + .seconds(60)
        repeat {
            answers = [try await scene.request("GET", aliceLocation, key: key), try await scene.request("GET", bobLocation, key: key)]
            if answers.allSatisfy({ $0.status != 202 }) { break }
            try await Task.sleep(for: .milliseconds(200))
        } while ContinuousClock.now < deadline
        // Applied in order under "transfer": Alice's (bound by her token), then Bob's (transferred to him). Alice's
        // claim answers today's owner: 409, without Bob's id; Bob's answers Bob's entitlements only.
        #expect(answers[0].status == 409 && !answers[0].json.serialized.contains(bob), "\(answers[0].status) \(answers[0].json.serialized)")
        #expect(answers[1].status == 200 && answers[1].json["customer"]?.objectValue?["customerId"] == .string(bob), "\(answers[1].json.serialized)")
        #expect(!answers[1].json.serialized.contains(alice), "Bob's claim named Alice: \(answers[1].json.serialized)")
        // The transaction route needs the customer and answers only that customer's claim.
        let path = "/v1/apps/\(scene.bundleId)/purchases/\(event.transactionId)"
        #expect(try await scene.request("GET", path, key: key).status == 400)
        let bobs = try await scene.request("GET", path + "?customerId=\(bob)", key: key)
        #expect(bobs.status == 200 && !bobs.json.serialized.contains(alice), "\(bobs.json.serialized)")
        #expect(try await scene.request("GET", path + "?customerId=\(UUID().uuidString.lowercased())", key: key).status == 404)
        // Reads never wrote to Apple: Set App Account Token was called by the POSTs' answers only (here none: both
        // 202), never by the GETs above.
        #expect(scene.scene.apple.fake.appAccountTokenCalls.isEmpty, "\(scene.scene.apple.fake.appAccountTokenCalls)")
        await scene.finish()
    }

    @Test("a burst past a key's rate is 429 with Retry-After and the problem body; another key is not slowed; lastUsedAt is written")
    func rateLimits() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        // One token every 10 s after a burst of 5: unless the 12 requests take over 20 s, at least 5 find the bucket
        // empty (with 2 a second, a loaded machine's slow requests refilled it: 429s were timing, not the limit).
        try await scene.startAPI(extra: ["CUSTOMER_API_RATE_LIMIT": "0.1", "CUSTOMER_API_RATE_BURST": "5"])
        let greedy = try await scene.key(scope: "read"), calm = try await scene.key(scope: "read")
        let path = "/v1/apps/\(scene.bundleId)/customers/\(UUID().uuidString.lowercased())"
        var statuses: [Int] = []
        var refusal: (status: Int, json: JSONObject, headers: [String: String])?
        for _ in 0..<12 {
            let answer = try await scene.request("GET", path, key: greedy.secret)
            statuses.append(answer.status)
            if answer.status == 429 { refusal = answer }
        }
        #expect(statuses.prefix(5).allSatisfy { $0 == 200 } && statuses.filter { $0 == 429 }.count >= 5, "\(statuses)")
        #expect(refusal?.json["error"]?.objectValue?["code"] == .string("rate_limited") && Int(refusal?.headers["retry-after"] ?? "") ?? 0 >= 1, "\(String(describing: refusal))")
        #expect(try await scene.request("GET", path, key: calm.secret).status == 200, "another key was slowed")
        let listed = try await scene.run(["api-keys", "list", "--json"])
        let keys = (try StrictJSONParser().parse(Array((listed.output.split(separator: "\n").last.map(String.init) ?? "").utf8)).arrayValue ?? []).compactMap(\.objectValue)
        #expect(keys.first { $0["id"] == .string(greedy.id) }?["lastUsedAt"]?.stringValue != nil, "\(listed.output)")
        await scene.finish()
    }

    @Test("a worker stopped: 202 with a Location that answers 202 until a worker runs again, then 200")
    func workerStopped() async throws {
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI(extra: ["CUSTOMER_API_APPLY_TIMEOUT_MS": "1000"])
        let key = try await scene.key().secret
        await scene.fixture.stopOneByOne(scene.scene.workers)
        let customer = UUID().uuidString.lowercased()
        let event = currentPeriod(seed: 51, token: customer)
        let accepted = try await scene.purchase(event, customer: customer, key: key)
        let location = accepted.headers["location"] ?? ""
        #expect(
            accepted.status == 202 && location.hasPrefix("/v1/apps/\(scene.bundleId)/purchases/claims/purchase-") && accepted.json["location"] == .string(location),
            "\(accepted.status) \(accepted.headers) \(accepted.json.serialized)")
        #expect(accepted.json["status"] == .string("pending"))
        #expect(try await scene.request("GET", location, key: key).status == 202)

        let (worker, _) = try await scene.fixture.startWorker(group: scene.scene.group, postgresURL: scene.scene.database)
        scene.scene.workers = [worker]
        var polled = try await scene.request("GET", location, key: key)
        let deadline = ContinuousClock.now + .seconds(60)
        while polled.status == 202, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            polled = try await scene.request("GET", location, key: key)
        }
        #expect(polled.status == 200 && polled.json["purchase"]?.objectValue?["transactionId"] == .string(event.transactionId), "\(polled.json.serialized)")
        #expect(polled.json["customer"]?.objectValue?["hasActiveAccess"] == .bool(true))
        await scene.finish()
    }
}
