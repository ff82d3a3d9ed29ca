import AppStoreNotifications
import EntitlementStore
import Foundation
import Hummingbird
import KafkaClient
import Logging
import NotificationRecords
import PipelineConfiguration
import ServiceRuntime
import OpenAPIHummingbird
import OpenAPIRuntime
import PostgresNIO
import Prometheus
import ServiceLifecycle
import SharedSettings

/// The customer API process's services, in start order (a ServiceGroup stops them in reverse: the ops server, the
/// API server drains its requests, the producer flushes, the App Store clients and the database pool close).
public struct CustomerAPIServices: Sendable {
    public let services: [any Service]
}

/// Builds the customer API: the PostgreSQL pool, the reads' own pool (and their replicas, `POSTGRES_READ_URL`), a producer to the notifications topic (purchases are records of
/// kind `purchase`, keyed like every record by originalTransactionId), the API server generated from
/// docs/customer-api.yaml behind ingest's connection guard, and the ops server (`/health/live`, `/health/ready`:
/// PostgreSQL with the schema current and a broker reachable, `/metrics`).
public func buildCustomerAPIServices(
    configuration: CustomerAPIConfiguration,
    registry: PrometheusCollectorRegistry,
    logger: Logger,
    onServerRunning: @escaping @Sendable (_ apiPort: Int) async -> Void = { _ in },
    onOpsServerRunning: @escaping @Sendable (_ opsPort: Int) async -> Void = { _ in }
) throws -> CustomerAPIServices {
    let shared = configuration.shared
    let verifier = try SignedPayloadVerifier(configuration: try shared.verifierConfiguration())
    let postgres = PostgresClient(configuration: try shared.postgresConfiguration(), backgroundLogger: logger)
    let store = CustomerStore(client: postgres, logger: logger)
    // The reads' own pool: an app launch's read never waits for a connection behind purchases and their polling.
    let readPool = PostgresClient(
        configuration: try PipelineSettings.servicePool(url: shared.postgresURL, connections: configuration.readPoolSize), backgroundLogger: logger)
    let reads = try configuration.reads.router(primary: readPool, poolSize: configuration.readPoolSize, logger: logger)
    var producerConfiguration = KafkaProducerConfiguration(client: shared.kafka.clientConfiguration)
    producerConfiguration.deliveryTimeoutMilliseconds = max(1_000, Int(configuration.applyTimeout.wholeMilliseconds))
    producerConfiguration.lingerMilliseconds = 1
    let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger)
    // A request of a backend waits at most 2 s for Apple's turn, then gets 503 with Retry-After.
    let appStore = try shared.appStoreClients(maximumWait: .seconds(2), postgres: postgres, lane: .purchase, logger: logger)
    let metrics = CustomerAPIMetrics(registry: registry)
    let handler = CustomerAPIHandler(
        configuration: configuration, verifier: verifier, store: store, reads: reads, producer: PulledRecordProducer(producer: producer, topic: shared.topic, erasures: nil),
        appStore: appStore, metrics: metrics, orders: OrderLookupCache(ttl: configuration.orderCache), logger: logger)

    let router = Router(context: CustomerAPIRequestContext.self)
    // Each request is a server span named by its route (a trace of its own; a caller's `traceparent` is a link); a
    // purchase's record carries it.
    router.add(middleware: RouteTracingMiddleware())
    router.add(middleware: ClientAddressMiddleware())
    try handler.registerHandlers(on: router, middlewares: [
        ErrorResponseMiddleware(metrics: metrics, logger: logger),
        LocationHeaderMiddleware(),
        BodyLimitMiddleware(maximumBytes: configuration.maximumBodyBytes),
        AuthenticationMiddleware(
            keys: APIKeyCache(store: store, ttl: configuration.keyCache), configuredBundleIds: Set(shared.apps.compactMap(\.bundleId)),
            rateLimiter: KeyRateLimiter(rate: configuration.rateLimitPerSecond, burst: configuration.rateBurst),
            addressLimiter: KeyRateLimiter(rate: configuration.authAttemptsPerSecond, burst: configuration.authAttemptsBurst)),
    ])
    let limits = HTTPConnectionLimits(
        idleTimeout: configuration.idleTimeout, requestTimeout: configuration.requestTimeout,
        maximumBodyBytes: configuration.maximumBodyBytes, refusalBody: { code, reason in CustomerAPIError.body(code: CustomerAPIError.snakeCase(code), message: reason) },
        bodyTooLarge: (413, "body_too_large"))
    let api = Application(
        router: router,
        server: GuardedHTTP1Channel.builder(limits: limits) { status, _ in metrics.request(route: "connection", status: status) },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "appstore-customer-api"),
        onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? configuration.port) },
        logger: logger)

    let schema = EntitlementStore(client: postgres, logger: logger)
    let database = CachedProbe(ttl: .seconds(2)) { (try? await schema.pendingMigrations().isEmpty) ?? false }
    let broker = CachedProbe(ttl: .seconds(2)) { await producer.checkBrokerReachable(timeoutMilliseconds: 1_000) }
    let ops = OperationsRoutes.server(
        host: configuration.host, port: configuration.opsPort, name: "appstore-customer-api-ops", registry: registry, logger: logger,
        onRunning: onOpsServerRunning
    ) {
        guard await database.value() else { return "PostgreSQL did not answer, or its schema is not migrated (pipelinectl migrate)" }
        guard await broker.value() else { return "no Kafka broker answered" }
        return nil
    }
    let clients = AppStoreClients(clients: Array(appStore.values))
    let retrier = AppleTokenRetrier(
        handler: handler, enabled: !appStore.isEmpty, interval: configuration.appleTokenRetry, logger: logger)
    return CustomerAPIServices(services: [postgres, readPool, reads, clients, producer, retrier, api, ops])
}

/// Set App Account Token for new owners whose first call failed (or never ran), every `CUSTOMER_API_APPLE_TOKEN_RETRY`, in the
/// background: reads never write to Apple, and a failure at Apple delays only this loop.
struct AppleTokenRetrier: Service {
    let handler: CustomerAPIHandler
    let enabled: Bool
    let interval: Duration
    let logger: Logger

    func run() async throws {
        guard enabled else { return try await gracefulShutdown() }
        await repeatUntilGracefulShutdown(every: interval, firstAfter: interval) {
            do {
                for record in try await handler.store.purchasesAwaitingAppleToken(limit: 50) {
                    await handler.tellAppleTheOwner(record, ownershipType: nil)
                }
            } catch {
                logger.debug("could not list the owners Apple has not been told: \(String(reflecting: error))")
            }
        }
    }
}
