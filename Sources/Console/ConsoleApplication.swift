import EntitlementStore
import Foundation
import Hummingbird
import KafkaClient
import Logging
import PostgresNIO
import Prometheus
import ServiceLifecycle
import ServiceRuntime
import SharedSettings

/// Builds the console's services, in start order (a ServiceGroup stops them in reverse): the PostgreSQL pool (and the
/// pages' replicas, `POSTGRES_READ_URL`), a producer to the notifications topic (re-drives and reconcile
/// snapshots go through the workers like every record), the App Store clients when `APPSTORE_*` is set (reconcile),
/// the pages' server and the ops server (`/health/ready`: PostgreSQL answers with the schema current).
public func buildConsoleServices(configuration: ConsoleConfiguration, registry: PrometheusCollectorRegistry, logger: Logger) throws -> [any Service] {
    let shared = configuration.shared
    let postgres = PostgresClient(configuration: try shared.postgresConfiguration(), backgroundLogger: logger)
    var producerConfiguration = KafkaProducerConfiguration(client: shared.kafka.clientConfiguration)
    producerConfiguration.lingerMilliseconds = 1
    let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger)
    let appStore = try shared.appStoreClients(maximumWait: .seconds(5), postgres: postgres, lane: .console, logger: logger)
    let entitlements = EntitlementStore(client: postgres, logger: logger, erasureKey: shared.erasureKey)
    let actions = ConsoleActions(
        producer: producer, topic: shared.topic, deadLetterTopic: shared.deadLetterTopic, appStore: appStore, entitlements: entitlements, logger: logger)
    let metrics = ConsoleMetrics(registry: registry)
    let reads = try configuration.reads.router(primary: postgres, poolSize: shared.postgresPoolSize, logger: logger)
    let pages = ConsolePages(
        configuration: configuration, store: entitlements.console, actions: actions, reads: reads, metrics: metrics, logger: logger,
        limiter: LoginLimiter(window: configuration.loginWindow))
    let router = Router(context: ConsoleRequestContext.self)
    pages.register(on: router)
    // The connection guard ingest and the customer API use: idle connections closed, a request's head and body due
    // within the request timeout (408), bodies bounded (the largest form is a re-drive's selection).
    let limits = HTTPConnectionLimits(
        idleTimeout: configuration.idleTimeout, requestTimeout: configuration.requestTimeout,
        maximumBodyBytes: 256 * 1024, bodyTooLarge: (413, "bodyTooLarge"))
    let server = Application(
        router: router,
        server: GuardedHTTP1Channel.builder(limits: limits) { status, _ in metrics.request(route: "connection", status: status) },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "appstore-console"),
        logger: logger)

    let database = CachedProbe(ttl: .seconds(2)) { (try? await entitlements.pendingMigrations().isEmpty) ?? false }
    let ops = OperationsRoutes.server(
        host: configuration.host, port: configuration.opsPort, name: "appstore-console-ops", registry: registry, logger: logger
    ) {
        await database.value() ? nil : "PostgreSQL did not answer, or its schema is not migrated (pipelinectl migrate)"
    }
    return [postgres, reads, AppStoreClients(clients: Array(appStore.values)), producer, server, ops]
}

/// Requests and actions, by route and outcome (bounded labels).
struct ConsoleMetrics: Sendable {
    let registry: PrometheusCollectorRegistry

    func request(route: String, status: Int) {
        registry.makeCounter(descriptor: .init(metricName: "console_requests", unitName: "total", helpText: "Console requests by route and status"), labels: [("route", route), ("status", String(status))]).increment()
    }

    func action(_ action: String, outcome: String) {
        registry.makeCounter(descriptor: .init(metricName: "console_actions", unitName: "total", helpText: "Operator actions by outcome"), labels: [("action", action), ("outcome", outcome)]).increment()
    }

    func login(_ outcome: String) {
        registry.makeCounter(descriptor: .init(metricName: "console_logins", unitName: "total", helpText: "Sign-ins by outcome (ok, refused, limited)"), labels: [("outcome", outcome)]).increment()
    }
}
