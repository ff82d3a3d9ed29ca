import AppStoreNotifications
import EntitlementEvents
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import Prometheus
import ServiceLifecycle
import ServiceRuntime
import Tracing

extension WebhookEvent {
    /// An entitlement event as read from the events topic, with its structured CloudEvents body; nil for a
    /// record that is not one (it is skipped and counted).
    package init?(record: KafkaConsumerMessage) {
        guard let structured = CloudEventRecord.structured(record), let id = structured["id"]?.stringValue, let type = structured["type"]?.stringValue,
            let time = structured["time"]?.stringValue.flatMap(Timestamp.init(rfc3339:))
        else { return nil }
        let data = structured["data"]?.objectValue
        self.init(
            id: id, type: type, subject: structured["subject"]?.stringValue ?? "", time: Date(timeIntervalSince1970: Double(time.millisecondsSince1970) / 1000),
            bundleId: data?["bundleId"]?.stringValue, environment: data?["environment"]?.stringValue, partition: record.partition, offset: record.offset,
            body: structured.serialized)
        traceparent = record.headers.string(TraceParent.header)
    }
}

/// What the webhooks service exports. Deliveries are counted by outcome only (every endpoint together); the
/// oldest undelivered age is per endpoint id: endpoints are registered by an operator, a handful, so the label
/// stays bounded.
package struct WebhooksMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    /// `webhooks_events_total`: events read from the topic; `webhooks_deliveries_created_total`: deliveries they made.
    let eventsRead: Counter
    let deliveriesCreated: Counter
    let attemptDuration: DurationHistogram

    package init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        eventsRead = registry.makeCounter(descriptor: .init(metricName: "webhooks_events", unitName: "total", helpText: "Entitlement events read from the events topic"))
        deliveriesCreated = registry.makeCounter(
            descriptor: .init(metricName: "webhooks_deliveries_created", unitName: "total", helpText: "Deliveries created (one per event and endpoint that wants it)"))
        attemptDuration = registry.makeDurationHistogram(
            descriptor: .init(metricName: "webhooks_attempt_duration", unitName: "seconds", helpText: "Delivery attempts from the request to the answer (or the failure)"),
            buckets: [.milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30)])
    }

    /// `webhooks_attempts_total{outcome}`: `delivered`, `retry` (failed, another attempt scheduled), `dead`,
    /// `gone` (410: the endpoint disabled), `fenced` (the attempt outlived its lease; its answer was not recorded).
    func attempt(_ outcome: String) {
        registry.makeCounter(
            descriptor: .init(
                metricName: "webhooks_attempts", unitName: "total",
                helpText: "Delivery attempts by outcome: delivered, retry (failed, retried later), dead (schedule exhausted), gone (410), fenced (lease lost, not recorded)"),
            labels: [("outcome", outcome)]
        ).increment()
    }

    /// `webhooks_attempt_timeouts_total`: attempts cut at `WEBHOOK_TIMEOUT` (no answer, or a body that did not end).
    func timedOut() {
        registry.makeCounter(
            descriptor: .init(metricName: "webhooks_attempt_timeouts", unitName: "total", helpText: "Delivery attempts cut at the attempt's deadline (WEBHOOK_TIMEOUT)")
        ).increment()
    }

    /// `webhooks_disabled_endpoint_waiting_deliveries{endpoint}`: deliveries waiting for a disabled endpoint (0 while
    /// it is enabled); the alert tells the operator to tell the receiver's owner by another channel.
    func disabledWaiting(endpoint: String, count: Int) {
        registry.makeGauge(
            descriptor: .init(
                metricName: "webhooks_disabled_endpoint_waiting", unitName: "deliveries",
                helpText: "Per endpoint, deliveries waiting while it is disabled (0: enabled or nothing waits)"),
            labels: [("endpoint", endpoint)]
        ).record(Double(count))
    }

    /// `webhooks_oldest_undelivered_age_seconds{endpoint}`.
    func oldestUndelivered(endpoint: String, seconds: Double) {
        registry.makeGauge(
            descriptor: .init(metricName: "webhooks_oldest_undelivered_age", unitName: "seconds", helpText: "Per endpoint, the age of its oldest delivery not yet delivered (0: none waits)"),
            labels: [("endpoint", endpoint)]
        ).record(seconds)
    }
}

/// Reads the events topic in the `WEBHOOKS_GROUP_ID` group and turns each event into one pending delivery per
/// enabled endpoint that wants it, then stores the offsets: an event is committed only once its deliveries are
/// durable in PostgreSQL (a crash redelivers the batch; the deliveries' uniqueness makes that harmless).
/// The endpoints are read for every batch, so one added now gets the events read from now on (older ones by
/// `pipelinectl webhooks replay`).
package struct WebhookIngester: Service {
    let consumer: KafkaConsumer
    /// Bounds each database step (`WEBHOOKS_STORE_TIMEOUT`).
    let storeTimeout: Duration
    let store: WebhookStore
    let metrics: WebhooksMetrics
    let logger: Logger

    package func run() async throws {
        try await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let batch: [KafkaConsumerMessage]
                do {
                    batch = try await consumer.pollBatch(maximum: 500, timeoutMilliseconds: 200)
                } catch {
                    // A fatal consumer error (fenced, …) ends the process, so the orchestrator replaces it.
                    if let error = error as? KafkaError, error.isFatal { throw error }
                    logger.error("polling the events topic failed: \(error)")
                    try? await Task.sleep(for: .seconds(1))
                    continue
                }
                guard !batch.isEmpty else { continue }
                let events = batch.compactMap(WebhookEvent.init(record:))
                if events.count < batch.count { logger.warning("skipped records that are not entitlement events", metadata: ["count": "\(batch.count - events.count)"]) }
                var backoff: Duration = .milliseconds(200)
                while !Task.isCancelled {
                    do {
                        let created = try await withDeadline(storeTimeout, "recording deliveries") { [store] in
                            try await store.enqueue(events, endpoints: try await store.endpoints())
                        }
                        metrics.eventsRead.increment(by: Int64(batch.count))
                        metrics.deliveriesCreated.increment(by: Int64(created))
                        var next: [KafkaTopicPartition: Int64] = [:]
                        for record in batch { next[KafkaTopicPartition(topic: record.topic, partition: record.partition)] = record.offset + 1 }
                        try consumer.storeOffsets(next)
                        break
                    } catch {
                        logger.warning("could not record deliveries, retrying", metadata: ["error": "\(String(reflecting: error).prefix(300))"])
                        try? await Task.sleep(for: backoff)
                        backoff = min(backoff * 2, .seconds(10))
                    }
                }
            }
        }
    }
}

/// Delivers due deliveries, up to `WEBHOOKS_CONCURRENCY` at a time, claiming more as each finishes: a slow or
/// failing endpoint holds only its own slots (at most `maximumInFlightPerEndpoint` across every process), so other
/// endpoints, and other subscriptions of the same endpoint, go on. Within one (endpoint, subscription) only the
/// oldest pending delivery is ever claimed, so a failing one holds back that subscription's later events, in
/// sequence order, until it is delivered or dead.
package struct WebhookDispatcher: Service {
    let configuration: WebhooksConfiguration
    let store: WebhookStore
    let sender: WebhookSender
    let metrics: WebhooksMetrics
    let logger: Logger

    enum Finished { case attempt, tick }

    package func run() async throws {
        // Long enough for an attempt and its recording; a process killed mid-attempt leaves the delivery to others
        // once it ends (the same id is sent again: at least once).
        let lease = configuration.timeout * 2 + .seconds(5)
        // Not cancelled at a graceful shutdown: the loop stops claiming at its next wake-up, and the attempts in
        // flight (each bounded by the timeout) finish and are recorded.
        await withTaskGroup(of: Finished.self) { group in
            var inFlight = 0
            var ticking = false
            while !Task.isShuttingDownGracefully && !Task.isCancelled {
                if inFlight < configuration.concurrency {
                    do {
                        let limit = configuration.concurrency - inFlight
                        let due = try await withDeadline(configuration.storeTimeout, "claiming deliveries") { [store, configuration] in
                            try await store.claimDue(limit: limit, lease: lease, perEndpoint: configuration.maximumInFlightPerEndpoint)
                        }
                        for delivery in due {
                            inFlight += 1
                            group.addTask { await attempt(delivery); return .attempt }
                        }
                    } catch {
                        logger.warning("could not claim deliveries", metadata: ["error": "\(String(reflecting: error).prefix(300))"])
                    }
                }
                // Wake at the next finished attempt or after the poll interval, whichever is first.
                if !ticking {
                    ticking = true
                    let interval = configuration.pollInterval
                    group.addTask { try? await Task.sleep(for: interval); return .tick }
                }
                switch await group.next() {
                case .attempt?: inFlight -= 1
                case .tick?: ticking = false
                case nil: break
                }
            }
            for await _ in group {}
        }
    }

    func attempt(_ delivery: DueDelivery) async {
        // With tracing on, the attempt is a span of the notification's trace (the event record's context, kept on the
        // delivery): resolution, connect and the request within it. The HTTP client makes its POST a client span
        // under it and sends that span's `traceparent` to the receiver.
        let span: (any Span)? = PipelineTracing.isTracing
            ? startSpan("webhook attempt", context: PipelineTracing.context(ofTraceparent: delivery.traceparent), ofKind: .internal) : nil
        if let span {
            span.updateAttributes { attributes in
                attributes["webhook.endpoint_id"] = delivery.endpointId
                attributes["webhook.id"] = delivery.eventId
                attributes["webhook.attempt"] = delivery.attempts + 1
            }
        }
        var result = await ServiceContext.$current.withValue(span?.context ?? ServiceContext.current) {
            await sender.deliver(url: delivery.url, allowHTTP: delivery.allowHTTP, id: delivery.eventId, body: Array(delivery.body.utf8), secrets: delivery.secrets)
        }
        result.traceId = span.flatMap { PipelineTracing.traceparent(of: $0.context) }.flatMap(TraceParent.traceId)
        if let span {
            if let status = result.status { span.attributes["http.response.status_code"] = status }
            if !result.succeeded { span.setStatus(SpanStatus(code: .error, message: result.error ?? result.status.map { "HTTP \($0)" })) }
            span.end()
        }
        metrics.attemptDuration.record(.milliseconds(result.latencyMilliseconds))
        if result.timedOut { metrics.timedOut() }
        let outcome = configuration.outcome(of: result, attempts: delivery.attempts)
        switch outcome {
        case .dead: logger.warning("delivery dead: the retry schedule is exhausted", metadata: ["endpoint": "\(delivery.endpointId)", "delivery": "\(delivery.id)"])
        case .gone: logger.warning("the receiver answered 410 Gone: endpoint disabled", metadata: ["endpoint": "\(delivery.endpointId)"])
        case .delivered, .retry: break
        }
        // Recorded even while shutting down (the attempt happened); a failure leaves the lease to expire and the
        // delivery to be attempted again, with the same id.
        for wait in [0, 200, 1_000] {
            if wait > 0 { try? await Task.sleep(for: .milliseconds(wait)) }
            do {
                let recorded = try await withDeadline(configuration.storeTimeout, "recording an attempt") { [store, result] in
                    try await store.record(result, of: delivery, outcome: outcome)
                }
                if recorded {
                    metrics.attempt(outcome.label)
                } else {
                    metrics.attempt("fenced")
                    logger.warning("an attempt outlived its lease: its answer is not recorded", metadata: ["delivery": "\(delivery.id)"])
                }
                return
            } catch {
                logger.warning("could not record a delivery attempt", metadata: ["delivery": "\(delivery.id)", "error": "\(String(reflecting: error).prefix(300))"])
            }
        }
    }
}

/// Every few seconds: the oldest undelivered age and a disabled endpoint's waiting deliveries per endpoint into the gauges; every hour, pruning of finished
/// deliveries older than `WEBHOOK_DELIVERY_RETENTION`.
package struct WebhookMaintenance: Service {
    let configuration: WebhooksConfiguration
    let store: WebhookStore
    let metrics: WebhooksMetrics
    let logger: Logger

    package func run() async throws {
        await cancelWhenGracefulShutdown {
            var lastPrune = ContinuousClock.now - .seconds(3_600)
            var known: Set<String> = []
            while !Task.isCancelled {
                do {
                    let backlogs = try await withDeadline(configuration.storeTimeout, "reading the backlogs") { [store] in try await store.backlogs() }
                    for (endpoint, backlog) in backlogs {
                        metrics.oldestUndelivered(endpoint: endpoint, seconds: backlog.oldestAge)
                        metrics.disabledWaiting(endpoint: endpoint, count: backlog.enabled ? 0 : backlog.waiting)
                    }
                    for removed in known.subtracting(backlogs.keys) {
                        metrics.oldestUndelivered(endpoint: removed, seconds: 0)
                        metrics.disabledWaiting(endpoint: removed, count: 0)
                    }
                    known = Set(backlogs.keys)
                    if ContinuousClock.now - lastPrune >= .seconds(3_600) {
                        let retention = configuration.deliveryRetention
                        let pruned = try await withDeadline(configuration.storeTimeout, "pruning deliveries") { [store] in try await store.prune(olderThan: retention) }
                        if pruned > 0 { logger.info("pruned finished deliveries", metadata: ["count": "\(pruned)"]) }
                        lastPrune = ContinuousClock.now
                    }
                } catch {
                    logger.debug("webhook maintenance failed: \(error)")
                }
                try? await Task.sleep(for: .seconds(5))
            }
        }
    }
}
