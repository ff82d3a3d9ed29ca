@testable import Console
import EntitlementStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import KafkaClient
import Logging
import PipelineConfiguration
import StoreTestSupport
import TestSigning
import TestSupport
import PostgresNIO
import Testing
import TestGates

/// The console's router in process (Hummingbird's test client) over a real PostgreSQL: no browser, no spawned binary.
/// The browser suite (ConsoleBrowserTests) stays the end-to-end tier.
@Suite("Console pages in process", .requiresPostgres)
struct ConsoleRouterTests: MintedSuite {
    static let logger = quietLogger("console-router-tests")

    /// The console's pages registered on a router, as `buildConsoleServices` does, over `store`, handed to `body`; the
    /// producer (created, never used here: no broker listens at its address) is closed after it, so librdkafka stops
    /// trying to connect.
    func withApplication(
        _ store: EntitlementStore, database: String, allowHTTP: Bool = true, _ body: (any ApplicationProtocol) async throws -> Void
    ) async throws {
        let configuration = try ConsoleConfiguration.fromEnvironment(EnvironmentReader([
            // The producer is created, never used here: no broker is needed at that address.
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "POSTGRES_URL": database, "APPS": "\(minter.bundleId):\(minter.appAppleId)",
            "CONSOLE_ALLOW_HTTP": String(allowHTTP),
        ]))
        // Its failed connections to the unused address are expected: only a critical line would be news.
        let silent = quietLogger("console-router-producer", level: .critical)
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(client: configuration.shared.kafka.clientConfiguration), logger: silent)
        let actions = ConsoleActions(
            producer: producer, topic: "t", deadLetterTopic: "t.dead-letter", appStore: [:], entitlements: store, logger: Self.logger)
        let pages = ConsolePages(
            configuration: configuration, store: store.console, actions: actions,
            reads: ReadRouter(primary: store.client, replicas: [], settings: ReadRoutingSettings(), logger: Self.logger),
            metrics: ConsoleMetrics(registry: .init()), logger: Self.logger,
            limiter: LoginLimiter(window: configuration.loginWindow))
        let router = Router(context: ConsoleRequestContext.self)
        pages.register(on: router)
        do {
            try await body(Application(router: router))
        } catch {
            await producer.close()
            throw error
        }
        await producer.close()
    }

    @Test("signed out: the sign-in page, the stylesheet, and every other page sends you to sign in; a wrong password is 401; plain HTTP is refused unless allowed")
    func signedOut() async throws {
        try await withMigratedStore("console-router", logger: Self.logger) { store, _ in
            try await withApplication(store, database: try RequiredServices.postgresURL, allowHTTP: false) { app in try await app.test(.router) { client in
                try await client.execute(uri: "/login", method: .get) { response in
                    #expect(response.status == .forbidden && String(buffer: response.body).contains("TLS only"))
                }
                try await client.execute(uri: "/login", method: .get, headers: [HTTPField.Name("X-Forwarded-Proto")!: "https"]) { #expect($0.status == .ok) }
            } }
            try await withApplication(store, database: try RequiredServices.postgresURL) { app in try await app.test(.router) { client in
                try await client.execute(uri: "/login", method: .get) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body).contains("action=\"/login\""))
                }
                try await client.execute(uri: "/static/console.css", method: .get) { response in
                    #expect(response.status == .ok && response.headers[.contentType]?.hasPrefix("text/css") == true)
                }
                try await client.execute(uri: "/search?q=1000", method: .get) { response in
                    #expect(response.status == .seeOther)
                    #expect(response.headers[.location]?.hasPrefix("/login") == true, "\(response.headers)")
                }
                let form = "email=nobody%40example.com&password=wrong"
                try await client.execute(
                    uri: "/login", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"], body: ByteBuffer(string: form)
                ) { response in
                    #expect(response.status == .unauthorized)
                }
            } }
        }
    }

    @Test("signed in: a search by originalTransactionId, by transactionId or by notificationUUID leads to the subscription's page; nothing found lists nothing")
    func search() async throws {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 41, signedDate: Self.start, type: "SUBSCRIBED", subtype: "INITIAL_BUY")
        event.notificationUUID = deterministicUUID(41)
        event.expiresDate = Self.start + 30 * Self.day
        let signed = minter.signedNotification(event)
        let stored = StoredNotification(
            verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: 0)
        let originalTransactionId = try #require(stored.verified.transactionInfo?.model.originalTransactionId)
        let transactionId = try #require(stored.verified.transactionInfo?.model.transactionId)
        try await withMigratedStore("console-router", logger: Self.logger) { store, _ in
            _ = try await store.store([stored])
            #expect(try await store.console.addOperator(email: "ops@example.com", role: .viewer, passwordHash: "unused"))
            let account = try #require(try await store.console.operatorAccount(email: "ops@example.com"))
            let (token, _) = try await store.console.openSession(operatorId: account.id)
            let cookie: HTTPFields = [.cookie: "console_session=" + token]
            let page = ConsolePaths.subscription(bundle: minter.bundleId, id: originalTransactionId)
            try await withApplication(store, database: try RequiredServices.postgresURL) { app in try await app.test(.router) { client in
                for term in [originalTransactionId, transactionId, deterministicUUID(41)] {
                    try await client.execute(uri: "/search?q=" + ConsolePaths.component(term), method: .get, headers: cookie) { response in
                        #expect(response.status == .seeOther, "\(term)")
                        #expect(response.headers[.location] == page, "\(term)")
                    }
                }
                try await client.execute(uri: page, method: .get, headers: cookie) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body).contains(originalTransactionId))
                }
                try await client.execute(uri: "/search?q=no-such-thing", method: .get, headers: cookie) { response in
                    #expect(response.status == .ok)
                    #expect(!String(buffer: response.body).contains("/subscriptions/"))
                }
            } }
        }
    }

    @Test("a customer's page lists the offers signed for them, and which purchase redeemed each")
    func customerOffers() async throws {
        let customer = "9f6e1d2c-aaaa-4bbb-8ccc-ddddeeeeffff"
        try await withMigratedStore("console-router", logger: Self.logger) { store, client in
            try await client.query(PostgresQuery(unsafeSQL: """
                INSERT INTO offer_signatures (nonce, environment, bundle_id, customer_id, product_id, kind, offer_identifier, transaction_id, issued_at, rule,
                    redeemed_transaction_id, redeemed_at)
                VALUES ('nonce-1', 'Production', '\(minter.bundleId)', '\(customer)', 'monthly', 'promotional-offer', 'loyal_3m', '2000', now() - interval '1 day',
                        'every-condition-of-loyal_3m-holds', '2001', now()),
                       ('nonce-2', 'Production', '\(minter.bundleId)', '\(customer)', 'monthly', 'introductory-offer-eligibility', NULL, '2000', now(),
                        'subscribed-before-in-group', NULL, NULL)
                """), logger: Self.logger)
            #expect(try await store.console.addOperator(email: "ops@example.com", role: .viewer, passwordHash: "unused"))
            let account = try #require(try await store.console.operatorAccount(email: "ops@example.com"))
            let (token, _) = try await store.console.openSession(operatorId: account.id)
            let cookie: HTTPFields = [.cookie: "console_session=" + token]
            try await withApplication(store, database: try RequiredServices.postgresURL) { app in try await app.test(.router) { client in
                try await client.execute(uri: ConsolePaths.customer(bundle: minter.bundleId, customerId: customer), method: .get, headers: cookie) { response in
                    let body = String(buffer: response.body)
                    #expect(response.status == .ok)
                    #expect(body.contains("data-nonce=\"nonce-1\" data-redeemed=\"true\"") && body.contains("2001 ("), "\(body)")
                    #expect(body.contains("data-nonce=\"nonce-2\" data-redeemed=\"false\"") && body.contains("not redeemed"))
                    #expect(body.range(of: "nonce-2")!.lowerBound < body.range(of: "nonce-1")!.lowerBound, "newest first")
                }
                try await client.execute(uri: ConsolePaths.customer(bundle: minter.bundleId, customerId: UUID().uuidString), method: .get, headers: cookie) { response in
                    #expect(String(buffer: response.body).contains("No offer signed for this customer."))
                }
            } }
        }
    }

    @Test("search hits become one link per page, each built from stored identifiers, percent-encoded")
    func links() {
        let links = ConsolePages.links(to: [
            SearchHit(kind: "subscription", bundle: "com.example.app", id: "1000", extra: nil),
            SearchHit(kind: "transaction", bundle: "com.example.app", id: "1000", extra: "2000"),
            SearchHit(kind: "customer", bundle: "com.example.app", id: "a/b", extra: nil),
            SearchHit(kind: "notification", bundle: "", id: nil, extra: "uuid-1"),
            SearchHit(kind: "dead letter", bundle: "", id: nil, extra: "uuid 2"),
        ])
        #expect(links.map(\.path) == [
            "/apps/com.example.app/customers/a%2Fb", "/apps/com.example.app/subscriptions/1000", "/dead-letters?q=uuid%202", "/notifications/uuid-1",
        ])
    }
}
