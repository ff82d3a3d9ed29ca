import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

/// An outbox row on its way to the events topic.
public struct OutboxEvent: Sendable, Hashable {
    /// The outbox row's id: within one subscription, the order its events were written in.
    public var rowId: Int64
    public var eventId: String
    public var type: String
    public var source: String
    public var subject: String
    /// `ce_time`, RFC 3339 with milliseconds.
    public var time: String
    public var sequence: Int64?
    /// The JSON `data`, exactly as written in the batch transaction.
    public var data: String
    /// The trace context of the worker's span for its cause (W3C `traceparent`), when tracing was on.
    public var traceparent: String?

    public init(rowId: Int64, eventId: String, type: String, source: String, subject: String, time: String, sequence: Int64?, data: String) {
        self.rowId = rowId
        self.eventId = eventId
        self.type = type
        self.source = source
        self.subject = subject
        self.time = time
        self.sequence = sequence
        self.data = data
    }
}

extension EntitlementStore {
    /// An event's scalar columns as a JSON object; its `data` (a JSON document) travels beside it as text, so
    /// PostgreSQL parses it once rather than unescaping it out of the rows' JSON first.
    static func outboxRow(_ event: EntitlementEvent, traceparent: String? = nil) -> JSONValue {
        .object(JSONObject([
            "event_id": .string(event.id),
            "event_type": .string(event.type.rawValue),
            "source": .string(event.source),
            "subject": .string(event.subject),
            "event_time": millis(event.time),
            "sequence": event.sequence.map { .number(JSONNumber($0)) } ?? .null,
            "environment": .string(event.environment),
            "bundle_id": .string(event.bundleId),
            "original_transaction_id": text(event.originalTransactionId),
            "traceparent": text(traceparent),
        ]))
    }

    /// Inserted in the order given (the order the changes took effect), so within a subscription the row ids
    /// follow the sequence; an event id already there (it cannot be, as the ledger admits a cause once) is kept.
    /// The conflict names no columns: the outbox's unique keys hold the day it was written in (migration 28).
    /// `traceparents`: the trace context of each cause (by its dedupe key), kept on its events' rows.
    static func outboxStatement(_ events: [EntitlementEvent], traceparents: [String: String] = [:]) -> PostgresQuery {
        """
        INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, sequence, environment, bundle_id,
            original_transaction_id, data, traceparent)
        SELECT r.event_id, r.event_type, r.source, r.subject, to_timestamp(r.event_time / 1000.0), r.sequence, r.environment, r.bundle_id,
            r.original_transaction_id, r.data, r.traceparent
        FROM ROWS FROM (jsonb_to_recordset(\(JSONValue.array(events.map { outboxRow($0, traceparent: traceparents[$0.causeKey]) }).serialized)::jsonb)
            AS (event_id text, event_type text, source text, subject text, event_time bigint, sequence bigint, environment text, bundle_id text,
            original_transaction_id text, traceparent text),
            unnest(\(events.map(\.data.serialized))::text[])) WITH ORDINALITY
            AS r(event_id, event_type, source, subject, event_time, sequence, environment, bundle_id, original_transaction_id, traceparent, data,
            position)
        ORDER BY r.position
        ON CONFLICT DO NOTHING
        """
    }
}

extension EntitlementStore.EntitlementKey {
    /// The second key of the subscription's advisory lock: FNV-1a of the key, stable in every process.
    var advisoryLockId: Int32 {
        var hash: UInt32 = 2_166_136_261
        for part in [environment, bundleId, originalTransactionId] {
            for byte in part.utf8 {
                hash = (hash ^ UInt32(byte)) &* 16_777_619
            }
            hash = (hash ^ 0x1F) &* 16_777_619
        }
        return Int32(bitPattern: hash)
    }
}
