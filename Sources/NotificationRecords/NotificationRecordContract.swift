import AppStoreNotifications
import EntitlementStore
import Foundation
import KafkaClient
import PipelineConfiguration
import ServiceContextModule

// The notifications topic's record contract, shared by every process that writes to it or reads from it (ingest,
// the worker, the pull side, the customer API, re-drive): the headers, and the one producer of pulled records.
// docs/asyncapi.yaml documents each header; the deployment consistency test holds it against these names.

/// Record headers ingest sets on every notification record.
public enum NotificationRecordHeader {
    /// Milliseconds since 1970 when ingest received the request (also the record timestamp).
    public static let receivedAt = "received-at"
    /// `INGEST_INSTANCE_ID` of the ingest that accepted it.
    public static let ingestInstance = "ingest-instance"
    /// A UUID per request, also in ingest's log line and the response's `X-Request-Id`.
    public static let requestId = "request-id"
    /// The environment of the path it was POSTed to, when that path has one. Informational only.
    public static let environmentHint = "environment-hint"
    /// Where the record came from: absent for ingest's own, `history` for a backfill's (Get Notification History).
    public static let source = "source"
    /// A backfill's record: the result of Apple's last attempt to POST it (e.g. `TIMED_OUT`), as Apple wrote it.
    public static let sendAttemptResult = "send-attempt-result"
    /// The pull side's own record kinds (`PulledRecordKind`: status snapshots, history transactions); absent on
    /// Apple's notifications. Ingest never sets it, so nothing from the internet is read as one.
    public static let recordKind = "record-kind"

    /// When ingest (or the pull side) took the record: the `received-at` header, when it is a number.
    public static func receivedAt(of headers: [KafkaHeader]) -> Timestamp? {
        headers.string(receivedAt).flatMap { Int64($0) }.map(Timestamp.init(millisecondsSince1970:))
    }

    /// The archive's `source`: the header, bounded (it is only informational), or `ingest`.
    public static func source(of headers: [KafkaHeader]) -> String {
        guard let value = headers.string(source), !value.isEmpty else { return "ingest" }
        return String(UntrustedText.escaped(value, limit: 32))
    }
}

/// Record headers the worker sets on dead letters. The value and key are the original record's, unchanged.
public enum DeadLetterHeader {
    /// The stable error code (`VerificationError.code`), e.g. `signatureMismatch`.
    public static let errorCode = "error-code"
    /// The human-readable reason.
    public static let errorReason = "error-reason"
    /// For `nestedInvalid`: the nested JWS's own code.
    public static let errorCause = "error-cause"
    public static let originalTopic = "original-topic"
    public static let originalPartition = "original-partition"
    public static let originalOffset = "original-offset"
    public static let originalTimestamp = "original-timestamp"
    public static let consumerGroup = "consumer-group"
    public static let failedAt = "failed-at"
    /// How many times the record was tried (1 for verification failures, which never change on retry).
    public static let attempt = "attempt"
}

/// Headers a re-driven record carries.
public enum RedriveHeader {
    /// `topic/partition/offset` of the dead letter it was re-driven from.
    public static let from = "redriven-from"
    /// When (ms since 1970).
    public static let at = "redriven-at"
    /// How many times this payload was re-driven.
    public static let count = "redrive-count"

    /// Whether the record was re-driven from a dead letter (a delivery, but not Apple's).
    public static func isRedriven(_ headers: [KafkaHeader]) -> Bool { headers.string(from) != nil }
}

/// The one re-drive of a dead letter, for `pipelinectl dlq redrive` (from the dead-letter topic) and the console
/// (from the dead letter's copy in PostgreSQL, which keeps its headers): the value and key unchanged, the original
/// record's headers kept (ingest's, the record kind, the trace context), the worker's error headers dropped (a new
/// failure adds fresh ones), and `redriven-from`, `redriven-at` and `redrive-count` set.
public enum RedriveRecord {
    public static func make(
        value: [UInt8], key: [UInt8]?, deadLetterHeaders: [KafkaHeader], from deadLetter: String, to topic: String, now: Int64
    ) -> KafkaProducerMessage {
        let dropped = Set([
            DeadLetterHeader.errorCode, DeadLetterHeader.errorReason, DeadLetterHeader.errorCause, DeadLetterHeader.originalTopic,
            DeadLetterHeader.originalPartition, DeadLetterHeader.originalOffset, DeadLetterHeader.originalTimestamp, DeadLetterHeader.consumerGroup,
            DeadLetterHeader.failedAt, DeadLetterHeader.attempt, RedriveHeader.from, RedriveHeader.at, RedriveHeader.count,
        ])
        let count = deadLetterHeaders.string(RedriveHeader.count).flatMap(Int.init) ?? 0
        var headers = deadLetterHeaders.filter { !dropped.contains($0.key) }
        headers.append(KafkaHeader(key: RedriveHeader.from, string: deadLetter))
        headers.append(KafkaHeader(key: RedriveHeader.at, string: String(now)))
        headers.append(KafkaHeader(key: RedriveHeader.count, string: String(count + 1)))
        return KafkaProducerMessage(topic: topic, key: key, value: value, headers: headers)
    }
}

/// Produces what the pull side fetched to the notifications topic, as ingest produces notifications (acks=all,
/// idempotent, keyed by originalTransactionId so a subscription's records stay in order), with `record-kind`.
public struct PulledRecordProducer: Sendable {
    public let producer: KafkaProducer
    public let topic: String
    /// The erasure screen (the store's suppression list and key): records about an erased customer from before the
    /// erasure are held back here, before they reach the topic. Nil only where no record can be about a customer.
    public let erasures: EntitlementStore?

    public init(producer: KafkaProducer, topic: String, erasures: EntitlementStore?) {
        self.producer = producer
        self.topic = topic
        self.erasures = erasures
    }

    /// Sends all of `records` at once and waits for every acknowledgement; throws if any failed. Each carries the
    /// current trace context (the command's or the request's span), when tracing is on. Returns the records sent
    /// (those the erasure screen did not hold back).
    @discardableResult
    public func produce(_ records: [(kind: PulledRecordKind, key: String?, value: [UInt8], source: String)]) async throws -> [Bool] {
        let now = NotificationRecord.now()
        let held = try await erasures?.erased(records.map { ErasureClaim.of(record: $0.value, kind: $0.kind, receivedAt: Date()) }) ?? []
        let sent = records.indices.map { !held.contains($0) }
        let records = records.enumerated().filter { !held.contains($0.offset) }.map(\.element)
        guard !records.isEmpty else { return sent }
        try await producer.sendAllAndAwait(records.map { record in
            NotificationRecord.pulled(
                kind: record.kind, key: record.key, value: record.value, source: record.source, topic: topic, now: now,
                context: ServiceContext.current)
        })
        return sent
    }
}

/// The notifications topic's name as every process reads it (ingest writes it, the workers read it, the pull side and
/// `pipelinectl` write and read it), and its dead-letter topic's: one variable, one default, one description.
public enum NotificationsTopic {
    public static let defaultName = "appstore.notifications.v2"
    /// `NOTIFICATIONS_TOPIC`.
    public static let setting = Setting.string("NOTIFICATIONS_TOPIC", default: defaultName, "the topic ingest writes and the workers read")
    /// `DEAD_LETTER_TOPIC`: permanent failures, by default the topic's name + `.dead-letter`.
    public static let deadLetterSetting = SettingDescription(
        variable: "DEAD_LETTER_TOPIC", summary: "permanent failures: original bytes and key, headers `error-code`, `error-reason`, `error-cause`, `original-*`, `consumer-group`, `failed-at`, `attempt` (default: the topic + `.dead-letter`)",
        defaultText: nil)

    /// The dead-letter topic of `topic` when `DEAD_LETTER_TOPIC` does not name one.
    public static func defaultDeadLetterName(of topic: String) -> String { topic + ".dead-letter" }

    /// Both names as `environment` sets them.
    public static func names(_ environment: EnvironmentReader) throws(ConfigurationError) -> (topic: String, deadLetter: String) {
        let topic = try setting.read(environment)
        return (topic, environment.string(deadLetterSetting.variable, default: defaultDeadLetterName(of: topic)))
    }
}
