import EntitlementStore
import KafkaClient
import Logging
import Prometheus
import ServiceLifecycle
import ServiceRuntime
import Tracing

/// Publishes the outbox to the events topic, in order per subscription, at least once with stable ids.
///
/// **One relay at a time.** Every worker runs one; each round, the one that takes a transaction-scoped advisory
/// lock relays and the others sleep. Why one and not several with `FOR UPDATE SKIP LOCKED`: row locks taken page by
/// page would let two relays hold events of the same subscription at once (sequence 5 in one page, 6 in the
/// next) and publish them in either order; partitioning by key hash fixes that but needs a relay count agreed by
/// every worker and rebalanced when it changes. A single elected relay keeps order by construction, fails over
/// within one round (the lock goes with the transaction or the connection), and publishes several thousand
/// events per second (docs/benchmarks.md), more than the workers write.
///
/// **Order.** A round reads the oldest unpublished rows by id (within a subscription the id order is the
/// sequence order: the batch transaction writes them under the subscription's lock), queues them from one
/// thread in that order on an idempotent `acks=all` producer (gapless: a failure that could leave a gap stops
/// the producer instance, which is replaced), waits for every report, and marks published only the rows
/// acknowledged with no earlier failure of the same subscription in the round. The rest are sent again next
/// round, with the same ids: a consumer that dedupes by `ce_id` sees each subscription's events in order.
public struct OutboxRelay: Service {
    let configuration: EventsConfiguration
    let store: OutboxStore
    let producer: KafkaProducer
    let metrics: EventsMetrics
    let logger: Logger

    public init(configuration: EventsConfiguration, store: OutboxStore, producer: KafkaProducer, metrics: EventsMetrics, logger: Logger) {
        self.configuration = configuration
        self.store = store
        self.producer = producer
        self.metrics = metrics
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await relayUntilCancelled() }
                group.addTask { await measureAgeUntilCancelled() }
            }
        }
    }

    /// Relay rounds back to back while the outbox has more than a page, else one per `relayInterval`; a failed
    /// round (broker or database away) is retried with a growing pause (at most 5 s).
    func relayUntilCancelled() async {
        var failures = 0
        var lastPrune = ContinuousClock.now - .seconds(3600)
        while !Task.isCancelled {
            var full = false
            do {
                if let round = try await relayOnce() {
                    full = round.full
                    if ContinuousClock.now - lastPrune >= .seconds(60) {
                        let pruned = try await store.prunePublishedEvents(olderThan: configuration.outboxRetention)
                        if pruned > 0 { logger.debug("pruned published events", metadata: ["events.pruned": "\(pruned)"]) }
                        lastPrune = ContinuousClock.now
                    }
                }
                failures = 0
            } catch {
                failures += 1
                metrics.relayFailures.increment()
                if failures == 1 || failures % 30 == 0 { logger.warning("event relay round failed, retrying", metadata: ["error": "\(error)", "attempt": "\(failures)"]) }
            }
            if !full { try? await Task.sleep(for: failures > 0 ? min(configuration.relayInterval * (1 << min(failures, 5)), .seconds(5)) : configuration.relayInterval) }
        }
    }

    /// The age of the oldest unpublished event, every second, whatever the relay is doing (a round waiting on an
    /// unreachable broker must not freeze the figure the alert watches). Every worker exports it; take the max.
    func measureAgeUntilCancelled() async {
        while !Task.isCancelled {
            if let age = try? await store.oldestUnpublishedEventAge() { metrics.oldestUnpublishedAge.record(age) }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// The longest a round may take: every record's delivery timeout (twice: a round's records are queued at once
    /// but may be retried) and a minute for its three statements. Past it the round is abandoned and counted as a
    /// failed one: its rows stay unpublished and go again next round with the same ids. Found by the chaos run:
    /// after a broker kill and a PostgreSQL crash close together, the relays of both workers stopped for good,
    /// with no transaction open in PostgreSQL, nothing failed and nothing logged: a round was waiting on a step
    /// that never answered (a query on a connection the server dropped can; `withDeadline`).
    /// The acknowledgements have a deadline of their own, so that a round that timed out says which part hung.
    var roundTimeout: Duration { acknowledgementTimeout + .seconds(60) }
    var acknowledgementTimeout: Duration { .milliseconds(2 * producer.configuration.deliveryTimeoutMilliseconds) }

    /// One round: nil when another relay is elected.
    public func relayOnce() async throws -> (published: Int, full: Bool)? {
        let store = store
        let limit = configuration.relayBatchSize
        let acknowledgementTimeout = acknowledgementTimeout
        return try await withDeadline(roundTimeout, "an events relay round (its database statements)") { [self] in
            try await store.relayOutbox(limit: limit) { events in
                try await withDeadline(acknowledgementTimeout, "the broker's acknowledgements of \(events.count) events") { try await self.publish(events) }
            }
        }
    }

    /// Sends a round's events in order and answers which rows may be marked published.
    func publish(_ events: [OutboxEvent]) async throws -> [Int64] {
        let topic = configuration.topic
        // With tracing on, each event is sent in a span of the notification's trace (the outbox row's context).
        let spans: [(any Span)?] = events.map { event in
            guard PipelineTracing.isTracing, event.traceparent != nil else { return nil }
            let span = startSpan("send \(topic)", context: PipelineTracing.context(ofTraceparent: event.traceparent), ofKind: .producer)
            span.updateAttributes { attributes in
                attributes.messaging(operation: "send", destination: topic)
                attributes["cloudevents.event_id"] = event.eventId
                attributes["cloudevents.event_type"] = event.type
            }
            return span
        }
        let results = await producer.sendInOrderAndAwait(zip(events, spans).map { CloudEventRecord.message($0, topic: topic, context: $1?.context) })
        var blocked: Set<String> = []
        var published: [Int64] = []
        var firstError: KafkaError?
        for ((event, result), span) in zip(zip(events, results), spans) {
            if let span {
                switch result {
                case .success(let report): span.attributes.messaging(partition: report.partition, offset: report.offset)
                case .failure(let error): span.recordError(error)
                }
                span.end()
            }
            switch result {
            case .success(let report) where report.offset < 0:
                // An acknowledgement without an offset ("a duplicate of a send I already have") is not proof: a
                // broker that lost the record but kept its sequence state answers the same (tansu after a kill -9,
                // found by scripts/chaos.py; ingest refuses such acks too). Sent again next round, same id.
                blocked.insert(event.subject)
                metrics.unprovenAcknowledgements.increment()
                logger.warning("the broker acknowledged an event without an offset; it is sent again next round", metadata: ["event": "\(event.eventId)", "partition": "\(report.partition)"])
            case .success where !blocked.contains(event.subject):
                published.append(event.rowId)
            case .success:
                break
            case .failure(let error):
                blocked.insert(event.subject)
                firstError = firstError ?? error
            }
        }
        metrics.published.increment(by: Int64(published.count))
        if published.isEmpty, let firstError { throw firstError }
        return published
    }
}

/// The events' metrics, on the worker's `/metrics`.
public struct EventsMetrics: Sendable {
    /// `events_outbox_oldest_age_seconds`: how long the oldest unpublished event has waited (0 when none).
    public let oldestUnpublishedAge: Gauge
    /// `events_published_total`.
    public let published: Counter
    /// `events_unproven_acknowledgements_total`: acknowledgements without an offset, whose events are sent again.
    public let unprovenAcknowledgements: Counter
    /// `events_relay_failures_total`: relay rounds that failed (broker or database away).
    public let relayFailures: Counter

    public init(registry: PrometheusCollectorRegistry) {
        oldestUnpublishedAge = registry.makeGauge(
            descriptor: .init(metricName: "events_outbox_oldest_age", unitName: "seconds", helpText: "Age of the oldest entitlement event not yet published (0: none waits)"))
        published = registry.makeCounter(descriptor: .init(metricName: "events_published", unitName: "total", helpText: "Entitlement events published to the events topic"))
        unprovenAcknowledgements = registry.makeCounter(descriptor: .init(
            metricName: "events_unproven_acknowledgements", unitName: "total", helpText: "Broker acknowledgements without an offset; their events are sent again next round"))
        relayFailures = registry.makeCounter(
            descriptor: .init(metricName: "events_relay_failures", unitName: "total", helpText: "Relay rounds that failed (broker or database unreachable); retried"))
    }
}
