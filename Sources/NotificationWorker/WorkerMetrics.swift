import AppStoreNotifications
import KafkaClient
import Prometheus

/// What the worker exports on `/metrics`. Labels are bounded: outcome, error code, known notification type (or
/// `unknown`), field name; never an id or a raw value.
package struct WorkerMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    let batchDuration: DurationHistogram
    let verificationDuration: DurationHistogram
    let ready: Gauge
    let assignedPartitions: Gauge
    /// Failed attempts at the current batch's transaction (0 once it is stored): the alert for a stuck worker.
    let consecutiveBatchFailures: Gauge
    /// Apple's consumption requests not answered yet, and the seconds until the nearest one's 12-hour deadline
    /// (negative once missed): refunds are decided without your data after it.
    let consumptionRequestsPending: Gauge
    let consumptionRequestDeadline: Gauge
    /// Subscriptions changed since the metrics' daily rollups last saw them, as the worker that applied them last
    /// read it after its round (every worker exports its last reading; take the max).
    let metricRollupsPending: Gauge

    package init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        let buckets: [Duration] = [
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30),
        ]
        batchDuration = registry.makeDurationHistogram(
            descriptor: .init(metricName: "worker_batch_duration", unitName: "seconds", helpText: "Time from a batch polled to its offsets stored"),
            buckets: buckets)
        verificationDuration = registry.makeDurationHistogram(
            descriptor: .init(metricName: "worker_verification_duration", unitName: "seconds", helpText: "Time to verify a batch (all records, in parallel)"),
            buckets: buckets)
        ready = registry.makeGauge(descriptor: .init(metricName: "worker_ready", unitName: "", helpText: "1 while batches are being stored, 0 while retrying a transient failure"))
        assignedPartitions = registry.makeGauge(
            descriptor: .init(metricName: "worker_assigned_partitions", unitName: "", helpText: "Partitions this member owns; 0 on a member beyond the partition count"))
        consecutiveBatchFailures = registry.makeGauge(
            descriptor: .init(metricName: "worker_batch_failures_consecutive", unitName: "", helpText: "Failed attempts at storing the current batch (0 once stored)"))
        consumptionRequestsPending = registry.makeGauge(
            descriptor: .init(metricName: "worker_consumption_requests_pending", unitName: "", helpText: "CONSUMPTION_REQUEST notifications not answered yet"))
        consumptionRequestDeadline = registry.makeGauge(
            descriptor: .init(
                metricName: "worker_consumption_request_deadline", unitName: "seconds",
                helpText: "Seconds until the nearest unanswered consumption request's deadline (negative: missed; 43200 when none)"))
        metricRollupsPending = registry.makeGauge(
            descriptor: .init(metricName: "worker_metric_rollups_pending", unitName: "",
                              helpText: "Changed subscriptions the metrics' daily rollups have not applied yet, after this worker's last round"))
    }

    /// Adds `count` (nothing when 0) to the counter `<name>_total` of `labels`.
    private func add(_ count: Int = 1, to name: String, help: String, labels: [(String, String)] = []) {
        guard count > 0 else { return }
        registry.makeCounter(descriptor: .init(metricName: name, unitName: "total", helpText: help), labels: labels).increment(by: Int64(count))
    }

    /// Purchases linked to the offer signature they redeemed (docs/offers.md).
    func offersRedeemed(_ count: Int) {
        add(count, to: "worker_offers_redeemed", help: "Purchases linked to the offer signature they redeemed")
    }

    /// Records by outcome: `applied`, `duplicate`, `stale` (older than the stored state), `dead_lettered`.
    func records(_ outcome: String, _ count: Int) {
        add(count, to: "worker_notifications", help: "Notifications processed, by outcome", labels: [("outcome", outcome)])
    }

    /// A verified notification by type (`unknown` for a type this version does not know).
    func notificationType(_ verified: VerifiedNotification) {
        // Our own record kinds are counted under their own type (PURCHASE, STATUS_SNAPSHOT, TRANSACTION_HISTORY: a
        // closed set), not as Apple's unknown one.
        notificationType(label: verified.isPipelineRecord ? verified.payload.rawNotificationType ?? "unknown" : verified.payload.notificationType?.rawValue ?? "unknown")
    }

    func notificationType(label: String) {
        add(to: "worker_notification_types", help: "Verified notifications by notificationType", labels: [("type", label)])
    }

    /// A raw value no enum case matches: kept and processed, counted here.
    func unknownValue(field: String) {
        add(to: "worker_unknown_values", help: "Enum-like fields with a value this version does not know, by field", labels: [("field", field)])
    }

    /// Records about an erased customer from before the erasure, acknowledged and not stored, by record kind
    /// (`notification`, `statusSnapshot`, `historyTransaction`, `purchase`, `deadLetter`): `erasure_suppressed_total`.
    func erasureSuppressed(record: String, _ count: Int) {
        add(count, to: "erasure_suppressed", help: "Records about an erased customer, from before the erasure, acknowledged and not stored, by record kind", labels: [("record", record)])
    }

    /// Records that waited (once per retry) for an online revocation check's answer.
    func revocationCheckWaits(_ count: Int) {
        add(count, to: "worker_revocation_check_waits", help: "Records verified again because an online revocation check (OCSP) got no answer")
    }

    /// Erasures the worker ran (queued by RESCIND_CONSENT) and rows the retention job deleted, by store.
    func erasuresRun(_ count: Int) {
        add(count, to: "erasures_completed", help: "Erasures run by the worker (RESCIND_CONSENT)")
    }

    /// Changed subscriptions and refund-request changes this worker applied to the metrics' daily rollups.
    func metricRollupsApplied(_ count: Int) {
        add(count, to: "worker_metric_rollups_applied", help: "Changed subscriptions and refund-request changes applied to the metrics' daily rollups")
    }

    func retentionDeleted(store: String, _ count: Int) {
        add(count, to: "retention_deleted_rows", help: "Rows deleted by the retention job, by store", labels: [("store", store)])
    }

    /// A dead letter, by verification error code.
    func deadLettered(code: String) {
        add(to: "worker_dead_letters", help: "Records dead-lettered, by error code", labels: [("code", code)])
    }

    /// A status pull for a contradicted row, by outcome: `pulled`, `unknown_to_apple`, `failed`, `not_configured`.
    func contradictionPull(_ outcome: String) {
        add(to: "worker_contradiction_pulls", help: "Status pulls for rows that contradict Apple, by outcome", labels: [("outcome", outcome)])
    }

    /// Rows that contradict Apple's last word, by reason (measured every 30 s; every worker exports it, take the max).
    func contradicted(reason: String, _ count: Int) {
        registry.makeGauge(
            descriptor: .init(metricName: "entitlements_contradicted", unitName: "", helpText: "Entitlement rows that contradict Apple's last word, by reason"),
            labels: [("reason", reason)]
        ).record(Double(count))
    }

    func retry(step: String) {
        registry.makeCounter(
            descriptor: .init(metricName: "worker_retries", unitName: "total", helpText: "Transient failures retried, by step"),
            labels: [("step", step.replacingOccurrences(of: " ", with: "_"))]
        ).increment()
    }

    /// Records behind the end of a partition this member consumes, after its last stored batch (from librdkafka's
    /// cached high watermark). Summed over partitions it is the group's backlog; a partition that moved to
    /// another member keeps its last value here until that member reports it.
    func lag(partition: KafkaTopicPartition, records: Int64) {
        registry.makeGauge(
            descriptor: .init(metricName: "worker_consumer_lag", unitName: "records", helpText: "Records behind the partition's end after the last stored batch"),
            labels: [("topic", partition.topic), ("partition", String(partition.partition))]
        ).set(Double(records))
    }
}
