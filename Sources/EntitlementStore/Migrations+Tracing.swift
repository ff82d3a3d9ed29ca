extension Migrations {
    /// Where people look for a notification's trace: each delivery (a record of it on the topic: each of Apple's POSTs
    /// is a trace of its own), the archive (the delivery that applied it), a dead letter and a webhook attempt keep
    /// the W3C trace id; an outbox row, a webhook delivery and a dead letter keep the whole `traceparent`, so the
    /// relay, the webhooks service and the console's re-drive continue the notification's trace. Nullable columns
    /// only: no rewrite, no scan under a lock; NULL where tracing was off.
    static let tracing = Migration(version: 17, name: "tracing: trace ids and trace contexts", sql: [
        "ALTER TABLE notification_deliveries ADD COLUMN trace_id text",
        "ALTER TABLE notification_archive ADD COLUMN trace_id text",
        "ALTER TABLE dead_lettered_records ADD COLUMN trace_id text, ADD COLUMN traceparent text",
        "ALTER TABLE entitlement_events_outbox ADD COLUMN traceparent text",
        "ALTER TABLE webhook_deliveries ADD COLUMN traceparent text",
        "ALTER TABLE webhook_attempts ADD COLUMN trace_id text",
    ])
}
