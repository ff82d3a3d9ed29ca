import AppStoreNotifications
import EntitlementStore
import KafkaClient
import ServiceContextModule

/// An outbox row as a Kafka record in the CloudEvents Kafka protocol binding, binary content mode: the
/// attributes are `ce_*` headers, the value is the `data` JSON, `content-type` says so; key = subject.
///
/// No `ce_sequence`: the CloudEvents sequence extension orders events within a `source`, and our order is per
/// subscription (`subject`) inside a source per app. The order travels as `data.sequence` instead, next to the
/// subject it counts; the source stays per app, which is what consumers filter on.
public enum CloudEventRecord {
    /// `context`: the relay's send span, when tracing is on. The record then carries `traceparent` for this hop and,
    /// from the outbox row, `ce_traceparent` (the CloudEvents distributed-tracing extension) naming the span of the
    /// notification that caused the event: the same trace, from Apple's POST on.
    public static func message(_ event: OutboxEvent, topic: String, context: ServiceContext? = nil) -> KafkaProducerMessage {
        var headers = [
            KafkaHeader(key: CloudEventsHeader.specVersion, string: "1.0"),
            KafkaHeader(key: CloudEventsHeader.id, string: event.eventId),
            KafkaHeader(key: CloudEventsHeader.source, string: event.source),
            KafkaHeader(key: CloudEventsHeader.type, string: event.type),
            KafkaHeader(key: CloudEventsHeader.subject, string: event.subject),
            KafkaHeader(key: CloudEventsHeader.time, string: event.time),
        ]
        headers.append(KafkaHeader(key: CloudEventsHeader.contentType, string: "application/json"))
        if let traceparent = event.traceparent { headers.append(KafkaHeader(key: CloudEventsHeader.traceparent, string: traceparent)) }
        return KafkaProducerMessage(topic: topic, key: Array(event.subject.utf8), value: Array(event.data.utf8), headers: headers.injecting(context))
    }

    /// A record read back from the events topic as the CloudEvents structured form: the attributes and `data`
    /// in one JSON object (what `pipelinectl events tail --json` prints and webhooks deliver). Nil when the
    /// record is not a CloudEvent (no `ce_id`, or `data` that is not JSON).
    public static func structured(_ record: KafkaConsumerMessage) -> JSONObject? {
        guard let id = record.headers.string(CloudEventsHeader.id), let data = try? StrictJSONParser().parse(record.value) else { return nil }
        var object = JSONObject([
            "specversion": .string(record.headers.string(CloudEventsHeader.specVersion) ?? "1.0"),
            "id": .string(id),
            "source": .string(record.headers.string(CloudEventsHeader.source) ?? ""),
            "type": .string(record.headers.string(CloudEventsHeader.type) ?? ""),
            "subject": .string(record.headers.string(CloudEventsHeader.subject) ?? ""),
            "time": .string(record.headers.string(CloudEventsHeader.time) ?? ""),
        ])
        object["datacontenttype"] = .string(record.headers.string(CloudEventsHeader.contentType) ?? "application/json")
        object["data"] = data
        return object
    }
}
