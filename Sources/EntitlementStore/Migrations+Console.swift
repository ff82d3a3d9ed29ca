extension Migrations {
    /// What the operator console shows and who may see it. Every Kafka record of a notification is a delivery
    /// (keyed by its position, so a replay or a redelivered batch counts nothing twice; a re-driven record is marked,
    /// and not counted as Apple's); the ledger marks each notification that changed nothing `unchanged` (NULL:
    /// applied), in the batch transaction that decided it; a dead letter keeps its reason,
    /// the identifiers its payload claims (unverified, for finding it) and its payload. Operators, their sessions
    /// (only a token's hash) and the audit of their actions. Only new tables and nullable columns: no rewrite.
    static let console = Migration(version: 16, name: "console: deliveries, outcomes, dead letters' details, operators, sessions, audit", sql: [
        """
        CREATE TABLE notification_deliveries (
            kafka_topic text NOT NULL,
            kafka_partition integer NOT NULL,
            kafka_offset bigint NOT NULL,
            notification_uuid text NOT NULL,
            source text,
            redriven boolean NOT NULL DEFAULT false,
            received_at timestamptz,
            stored_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
        )
        """,
        "CREATE INDEX notification_deliveries_by_notification ON notification_deliveries (notification_uuid)",
        "ALTER TABLE notification_ledger ADD COLUMN outcome text",
        // A subscription's timeline keys (when each notification was first received) from the index alone.
        "CREATE INDEX notification_archive_timeline ON notification_archive (original_transaction_id, bundle_id) INCLUDE (received_at, stored_at)",
        """
        ALTER TABLE dead_lettered_records
            ADD COLUMN reason text,
            ADD COLUMN notification_uuid text,
            ADD COLUMN notification_type text,
            ADD COLUMN bundle_id text,
            ADD COLUMN original_transaction_id text,
            ADD COLUMN received_at timestamptz,
            ADD COLUMN redriven boolean NOT NULL DEFAULT false,
            ADD COLUMN payload text
        """,
        "CREATE INDEX dead_lettered_by_subscription ON dead_lettered_records (original_transaction_id) WHERE original_transaction_id IS NOT NULL",
        "CREATE INDEX dead_lettered_by_notification ON dead_lettered_records (notification_uuid) WHERE notification_uuid IS NOT NULL",
        "CREATE INDEX dead_lettered_by_time ON dead_lettered_records (dead_lettered_at DESC)",
        """
        CREATE TABLE operators (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            email text NOT NULL UNIQUE,
            role text NOT NULL CHECK (role IN ('viewer', 'support', 'admin')),
            password_hash text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            disabled_at timestamptz,
            last_login_at timestamptz
        )
        """,
        """
        CREATE TABLE operator_sessions (
            token_sha256 bytea PRIMARY KEY,
            operator_id uuid NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
            csrf_token text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            last_seen_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        """
        CREATE TABLE console_audit (
            id bigserial PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            operator_email text NOT NULL,
            action text NOT NULL,
            reason text NOT NULL,
            bundle_id text,
            original_transaction_id text,
            customer_id text,
            detail jsonb NOT NULL DEFAULT '{}'
        )
        """,
        // The timeline's reads: a subscription's events, and the webhook deliveries of an event.
        "CREATE INDEX entitlement_events_outbox_by_subscription ON entitlement_events_outbox (original_transaction_id, id)",
        "CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id)",
        "CREATE INDEX console_audit_by_subscription ON console_audit (original_transaction_id) WHERE original_transaction_id IS NOT NULL",
    ])
}
