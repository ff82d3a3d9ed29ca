import AppStoreBudget
import AppStoreNotifications
import AppStorePull
import AppStoreServerAPI
import EntitlementEvents
import EntitlementStore
import Foundation
import Hummingbird
import KafkaClient
import Logging
import NotificationRecords
import PostgresNIO
import Prometheus
import ServiceLifecycle
import ServiceRuntime
import SubscriptionMetrics

/// The worker process's services, in dependency order (a ServiceGroup shuts them down in reverse: the ops server,
/// then the worker finishes its batch, then the consumer commits and leaves the group, then the events relay
/// ends its round and its producer flushes, then the dead-letter producer flushes, then the database pool closes).
package struct WorkerServices: Sendable {
    package let services: [any Service]
    package let worker: NotificationWorker
}

/// Builds the worker: PostgreSQL pool, dead-letter producer, consumer, the `NotificationWorker`, and the ops HTTP
/// server (`/health/live`, `/health/ready`, `/metrics`). Fails (naming the setting) if a configured root cannot
/// be read or a client cannot be created.
package func buildWorkerServices(
    configuration: WorkerConfiguration,
    registry: PrometheusCollectorRegistry,
    logger: Logger,
    onOpsServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) throws -> WorkerServices {
    let verifier = try SignedPayloadVerifier(configuration: try configuration.settings.verifierConfiguration())
    let postgres = PostgresClient(configuration: try configuration.settings.postgresConfiguration(), backgroundLogger: logger)
    let deadLetters = try KafkaProducer(configuration: configuration.deadLetterProducerConfiguration, logger: logger)
    let consumer = try KafkaConsumer(configuration: configuration.consumerConfiguration, topics: [configuration.topic], logger: logger)
    let store = EntitlementStore(
        client: postgres, logger: logger, statementTimeout: configuration.storeTimeout * 0.9, emitsEvents: configuration.events.enabled,
        erasureKey: configuration.erasureKey, consentRescindedErases: configuration.consentRescindedErases)
    let metrics = WorkerMetrics(registry: registry)
    let worker = NotificationWorker(
        configuration: configuration, consumer: consumer, deadLetters: deadLetters, store: store, verifier: verifier, metrics: metrics, logger: logger)
    let consumptionGauge = ConsumptionRequestGauge(store: store, metrics: metrics, logger: logger)

    let ops = OperationsRoutes.server(
        host: configuration.opsHost, port: configuration.opsPort, name: "appstore-worker", registry: registry, logger: logger,
        onRunning: onOpsServerRunning) { worker.notReadyReason }
    // The events relay (when events are on): its producer starts before it and closes after it.
    var relayServices: [any Service] = []
    if configuration.events.enabled {
        let eventsProducer = try KafkaProducer(configuration: configuration.eventsProducerConfiguration, logger: logger)
        let relay = OutboxRelay(
            configuration: configuration.events, store: OutboxStore(client: postgres, logger: logger, statementTimeout: store.statementTimeout), producer: eventsProducer, metrics: EventsMetrics(registry: registry), logger: logger)
        relayServices = [eventsProducer, relay]
    }
    // Self-healing of rows that contradict Apple (only where an App Store Server API key is configured).
    var healServices: [any Service] = []
    if let variables = configuration.appStoreVariables {
        var reconcilers: [AppStoreNotifications.Environment: StatusReconciler] = [:]
        // Healing shares the app's budget with every other process, in its lane (below the purchase path).
        let budget = SharedRequestBudget(client: postgres, logger: logger)
        for environment in Set(configuration.apps.flatMap(\.environments)) where environment == .production || environment == .sandbox {
            let api = AppStoreServerAPIClient(
                configuration: try AppStoreServerAPIConfiguration.fromEnvironment(variables, environment: environment), logger: logger, budget: budget, defaultLane: .healing)
            reconcilers[environment] = StatusReconciler(api: api, producer: PulledRecordProducer(producer: deadLetters, topic: configuration.topic, erasures: store), store: store, logger: logger)
        }
        healServices = [ContradictionHealer(
            store: store, reconcilers: reconcilers, apps: configuration.apps, interval: configuration.healInterval, retryAfter: configuration.healRetryAfter,
            metrics: metrics, logger: logger)]
    }
    let maintenance = WorkerMaintenance(
        worker: worker, retention: RetentionStore(client: postgres, logger: logger), policy: configuration.retention, interval: configuration.retentionInterval,
        metrics: metrics, logger: logger)
    let rollups = MetricRollupsAggregator(client: postgres, interval: configuration.metricRollupsInterval, metrics: metrics, logger: logger)
    return WorkerServices(
        services: [postgres, deadLetters] + relayServices + [consumer, worker, consumptionGauge, maintenance, rollups] + healServices + [ops], worker: worker)
}

/// Every `RETENTION_INTERVAL`: the erasures RESCIND_CONSENT queued that are still waiting, the coming months'
/// partitions (`PartitionMaintenance.createComing`, idempotent), then the retention job (`RetentionStore.prune`:
/// whole months of the archive are dropped) by one worker of the group at a time (a session advisory lock; the
/// others skip the round). The first round runs a minute after start, not during a rolling restart's rebalance.
struct WorkerMaintenance: Service {
    let worker: NotificationWorker
    let retention: RetentionStore
    let policy: RetentionPolicy
    let interval: Duration?
    let metrics: WorkerMetrics
    let logger: Logger

    /// "rtnt": the lock that elects the worker pruning this round.
    static let lockKey: Int64 = 0x7274_6E74

    func run() async throws {
        guard let interval else { return try await gracefulShutdown() }
        await repeatUntilGracefulShutdown(every: interval, firstAfter: min(interval, .seconds(60))) {
            await worker.runPendingErasures()
            do {
                // This month's and the next two months' partitions, ahead of the batches that need them.
                try await PartitionMaintenance(client: retention.client, logger: logger).createComing()
            } catch {
                logger.warning("creating the coming months' partitions failed, retried next round: \(UntrustedText.escaped(String(describing: error), limit: 400))")
            }
            do {
                let deleted: [String: Int]
                do {
                    deleted = try await EntitlementStore(client: retention.client, logger: logger).withAdvisoryLock(Self.lockKey, name: "retention round") {
                        try await retention.prune(policy)
                    }
                } catch is AdvisoryLockHeld {
                    return
                }
                for (store, count) in deleted { metrics.retentionDeleted(store: store, count) }
                if deleted.values.contains(where: { $0 > 0 }) {
                    logger.info("retention: pruned", metadata: Logger.Metadata(uniqueKeysWithValues: deleted.map { ($0.key, "\($0.value)") }))
                }
            } catch {
                logger.warning("retention round failed, retried next round: \(UntrustedText.escaped(String(describing: error), limit: 400))")
            }
        }
    }
}

/// Every `METRIC_ROLLUPS_INTERVAL`: one worker of the group (a session advisory lock; the others skip the round)
/// applies the subscriptions changed since the metrics' daily rollups last saw them (`MetricsStore.applyRollups`),
/// so a metric read finds little left to apply. Nothing is applied before the rollups are built.
struct MetricRollupsAggregator: Service {
    let client: PostgresClient
    let interval: Duration
    let metrics: WorkerMetrics
    let logger: Logger

    /// "mrag": the lock that elects the worker applying this round.
    static let lockKey: Int64 = 0x6D72_6167

    func run() async throws {
        await repeatUntilGracefulShutdown(every: interval, firstAfter: interval) {
            do {
                let store = MetricsStore(client: client, logger: logger)
                let applied: Int
                do {
                    applied = try await EntitlementStore(client: client, logger: logger).withAdvisoryLock(Self.lockKey, name: "metric rollups round") {
                        try await store.applyRollups(catalog: false)
                    }
                } catch is AdvisoryLockHeld {
                    // Another worker runs this round; only it reads what is left (this one keeps its last reading).
                    return
                }
                metrics.metricRollupsApplied(applied)
                metrics.metricRollupsPending.record(Double(try await store.rollupsPending()))
                if applied > 0 { logger.debug("metric rollups: applied \(applied) changed subscription(s)") }
            } catch {
                logger.warning("applying the metric rollups failed, retried next round: \(UntrustedText.escaped(String(describing: error), limit: 400))")
            }
        }
    }
}

/// Reads the pending consumption requests every 30 s into the worker's gauges (each worker exports the same
/// figure; dashboards take the max). A failed read keeps the last figure and is retried at the next tick.
struct ConsumptionRequestGauge: Service {
    let store: EntitlementStore
    let metrics: WorkerMetrics
    let logger: Logger

    func run() async throws {
        await repeatUntilGracefulShutdown(every: .seconds(30)) {
            do {
                let summary = try await store.pendingConsumptionSummary()
                metrics.consumptionRequestsPending.record(Double(summary.count))
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                metrics.consumptionRequestDeadline.record(Double(summary.nearestDeadline.map { $0 - now } ?? 43_200_000) / 1000)
                for (reason, count) in try await store.contradictionCounts() { metrics.contradicted(reason: reason, count) }
            } catch {
                logger.debug("could not read pending consumption requests: \(error)")
            }
        }
    }
}
