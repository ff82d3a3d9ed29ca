import AppStoreNotifications
import EntitlementStore
import Foundation
import KafkaClient
import ServiceContextModule

/// The only builder of records for the notifications topic and its dead-letter topic: every producer (ingest, the
/// backfill, the pull side, the worker's dead letters, both re-drives) asks here, so the headers docs/asyncapi.yaml
/// documents are set in one place. A record is keyed by its routing key (the notification's originalTransactionId,
/// as `UnverifiedPeek` reads it without trusting it), so a subscription's records stay in one partition, in order.
public enum NotificationRecord {
    /// Milliseconds since 1970, the clock every record's `received-at` and timestamp read.
    public static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// A notification Apple POSTed to ingest: `received-at`, `ingest-instance`, `request-id`, the path's
    /// `environment-hint` when it has one, and `context`'s trace (the send span).
    public static func ingested(
        signedPayload: String, topic: String, receivedAt: Int64, instanceId: String, requestId: String, environmentHint: String?,
        context: ServiceContext?
    ) -> KafkaProducerMessage {
        var headers = [
            KafkaHeader(key: NotificationRecordHeader.receivedAt, string: String(receivedAt)),
            KafkaHeader(key: NotificationRecordHeader.ingestInstance, string: instanceId),
            KafkaHeader(key: NotificationRecordHeader.requestId, string: requestId),
        ]
        if let environmentHint { headers.append(KafkaHeader(key: NotificationRecordHeader.environmentHint, string: environmentHint)) }
        return notification(signedPayload, topic: topic, headers: headers.injecting(context), timestamp: receivedAt)
    }

    /// A notification a backfill read from Get Notification History: `source: history` and Apple's last
    /// `send-attempt-result` (bounded: it is only informational).
    public static func fromHistory(
        signedPayload: String, topic: String, sendAttemptResult: String?, now: Int64, context: ServiceContext?
    ) -> KafkaProducerMessage {
        var headers = [
            KafkaHeader(key: NotificationRecordHeader.receivedAt, string: String(now)),
            KafkaHeader(key: NotificationRecordHeader.source, string: "history"),
        ]
        if let sendAttemptResult {
            headers.append(KafkaHeader(key: NotificationRecordHeader.sendAttemptResult, string: String(sendAttemptResult.prefix(64))))
        }
        return notification(signedPayload, topic: topic, headers: headers.injecting(context), timestamp: now)
    }

    /// One of the pull side's own records (a status snapshot, a history transaction): `record-kind` says which,
    /// `source` which command fetched it.
    public static func pulled(
        kind: PulledRecordKind, key: String?, value: [UInt8], source: String, topic: String, now: Int64, context: ServiceContext?
    ) -> KafkaProducerMessage {
        KafkaProducerMessage(
            topic: topic, key: key.map { Array($0.utf8) }, value: value,
            headers: [
                KafkaHeader(key: NotificationRecordHeader.receivedAt, string: String(now)),
                KafkaHeader(key: NotificationRecordHeader.source, string: source),
                KafkaHeader(key: NotificationRecordHeader.recordKind, string: kind.rawValue),
            ].injecting(context), timestamp: now)
    }

    /// The dead letter of the record read at `position`: its value, key and headers unchanged (the trace context
    /// among them, so a re-drive continues the notification's trace), the failure in `DeadLetterHeader`s.
    public static func deadLetter(
        of position: RecordPosition, key: [UInt8]?, value: [UInt8], headers original: [KafkaHeader], timestamp: Int64?,
        failure: (code: String, reason: String, cause: String?), consumerGroup: String, to deadLetterTopic: String, now: Int64
    ) -> KafkaProducerMessage {
        var headers = original
        headers.append(KafkaHeader(key: DeadLetterHeader.errorCode, string: failure.code))
        headers.append(KafkaHeader(key: DeadLetterHeader.errorReason, string: failure.reason))
        if let cause = failure.cause { headers.append(KafkaHeader(key: DeadLetterHeader.errorCause, string: cause)) }
        headers.append(KafkaHeader(key: DeadLetterHeader.originalTopic, string: position.topic))
        headers.append(KafkaHeader(key: DeadLetterHeader.originalPartition, string: String(position.partition)))
        headers.append(KafkaHeader(key: DeadLetterHeader.originalOffset, string: String(position.offset)))
        if let timestamp { headers.append(KafkaHeader(key: DeadLetterHeader.originalTimestamp, string: String(timestamp))) }
        headers.append(KafkaHeader(key: DeadLetterHeader.consumerGroup, string: consumerGroup))
        headers.append(KafkaHeader(key: DeadLetterHeader.failedAt, string: String(now)))
        headers.append(KafkaHeader(key: DeadLetterHeader.attempt, string: "1"))
        return KafkaProducerMessage(topic: deadLetterTopic, key: key, value: value, headers: headers)
    }

    /// A dead letter kept in PostgreSQL (the console's copy), re-driven as `pipelinectl dlq redrive` re-drives the
    /// topic's record (`RedriveRecord`). Letters recorded before migration 20 kept no headers: their `traceparent`
    /// alone is carried on.
    public static func redriven(
        payload: String, key: String?, storedHeaders: [StoredHeader], traceparent: String?, from deadLetter: String,
        to topic: String, now: Int64
    ) -> KafkaProducerMessage {
        var headers = storedHeaders.map { KafkaHeader(key: $0.key, value: $0.value) }
        if headers.isEmpty, let traceparent { headers.append(KafkaHeader(key: TraceParent.header, string: traceparent)) }
        return RedriveRecord.make(value: Array(payload.utf8), key: key.map { Array($0.utf8) }, deadLetterHeaders: headers, from: deadLetter, to: topic, now: now)
    }

    static func notification(_ signedPayload: String, topic: String, headers: [KafkaHeader], timestamp: Int64) -> KafkaProducerMessage {
        KafkaProducerMessage(
            topic: topic, key: UnverifiedPeek.partitionKey(ofNotification: signedPayload).map { Array($0.utf8) },
            value: Array(signedPayload.utf8), headers: headers, timestamp: timestamp)
    }
}
