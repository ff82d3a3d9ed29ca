extension Migrations {
    /// Creates (if missing) the partition of `parent` that holds `at`: one calendar month (UTC) for `period`
    /// `'month'`, one day for `'day'`, named `<parent>_YYYY_MM[_DD]`. The table is created on its own and then
    /// attached: `ATTACH PARTITION` takes only a SHARE UPDATE EXCLUSIVE lock on the parent, which does not wait for
    /// (or block) the workers' inserts and reads, where `CREATE TABLE … PARTITION OF` would take an ACCESS EXCLUSIVE
    /// one. Concurrent callers serialize on an advisory lock per partition name, held to the end of the caller's
    /// transaction (so call it in a short transaction of its own). Returns the partition's name.
    static let ensureTimePartitionFunction = """
        CREATE FUNCTION ensure_time_partition(parent regclass, period text, at timestamptz) RETURNS text VOLATILE LANGUAGE plpgsql AS $$
        DECLARE
            lower_bound timestamptz := date_trunc(period, at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
            upper_bound timestamptz := lower_bound + ('1 ' || period)::interval;
            partition_name text := parent::text || '_' || to_char(lower_bound AT TIME ZONE 'UTC',
                CASE period WHEN 'month' THEN 'YYYY_MM' WHEN 'day' THEN 'YYYY_MM_DD' END);
        BEGIN
            IF period NOT IN ('month', 'day') THEN
                RAISE EXCEPTION 'ensure_time_partition: period must be month or day, not %', period;
            END IF;
            IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                       WHERE i.inhparent = parent AND c.relname = partition_name) THEN
                RETURN partition_name;
            END IF;
            PERFORM pg_advisory_xact_lock(hashtext('ensure_time_partition'), hashtext(partition_name));
            IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                       WHERE i.inhparent = parent AND c.relname = partition_name) THEN
                RETURN partition_name;
            END IF;
            EXECUTE format('CREATE TABLE IF NOT EXISTS %I (LIKE %s INCLUDING ALL)', partition_name, parent);
            EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, partition_name, lower_bound, upper_bound);
            RETURN partition_name;
        END
        $$
        """

    /// The months (UTC) a migration creates partitions for besides those its rows need: this one and the next two.
    static let comingMonths = "SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + m * interval '1 month' FROM generate_series(0, 2) AS m"

    /// The notification tables, partitioned by month of Apple's `signedDate`, and the routing key in each key
    /// (docs/scale.md).
    ///
    /// - **Why `signed_date`.** It is part of the signed payload: a retry from Apple, a backfill, a replay of the
    ///   topic or a re-drive carries the same value, so a notification's ledger entry, archive row and deliveries
    ///   always land in the same month's partition and a key that includes it still dedupes. Retention then drops
    ///   whole months (`RetentionStore`): archived notifications are kept by when Apple signed them.
    /// - **The routing key** (`RoutingKey`: the subscription's original transaction id, or what a notification
    ///   without a transaction is keyed by in Kafka) is in every primary key, so a distributed PostgreSQL can
    ///   distribute these tables by it. Rows of earlier versions get the original transaction id, else the
    ///   notification's UUID (the worker's rule for notifications without a transaction reads nested JWSs the
    ///   database does not decode); the ledger claim and the deliveries check `(notification_uuid, signed_date)`
    ///   and the position first, so a replay of such a row is still a duplicate. A ledger row whose archive row was
    ///   already pruned has no known signedDate: it is filed under its `first_seen_at`, and its UUID is also kept
    ///   in `notification_ledger_undated`, which the claim checks as well.
    /// - The archive's foreign key to the ledger goes: a partitioned, distributable ledger would need it to carry
    ///   the routing key and date, and the worker writes both in one transaction anyway.
    ///
    /// This migration copies the rows inside its transaction, so the workers' writes wait for it: about a minute
    /// per million notifications. An online path for large books (copy in batches beside the running workers,
    /// then swap) is not built yet (docs/scale.md, status).
    static let partitions = Migration(version: 21, name: "notification ledger, archive and deliveries: monthly partitions, routing keys", sql: [
        ensureTimePartitionFunction,
        "DROP VIEW notifications",
        "DROP FUNCTION archived_signed_payload(notification_archive)",
        "DROP FUNCTION archived_payload_text(notification_archive)",
        "DROP FUNCTION archived_transaction_info(notification_archive)",
        "ALTER TABLE notification_archive DROP CONSTRAINT notifications_notification_uuid_fkey",
        "ALTER TABLE notification_ledger RENAME TO notification_ledger_unpartitioned",
        "ALTER INDEX notification_ledger_pkey RENAME TO notification_ledger_unpartitioned_pkey",
        "ALTER TABLE notification_archive RENAME TO notification_archive_unpartitioned",
        "ALTER TABLE notification_deliveries RENAME TO notification_deliveries_unpartitioned",
        "ALTER INDEX notification_deliveries_pkey RENAME TO notification_deliveries_unpartitioned_pkey",
        """
        CREATE TABLE notification_ledger (
            notification_uuid text NOT NULL,
            routing_key text NOT NULL,
            signed_date timestamptz NOT NULL,
            first_seen_at timestamptz NOT NULL DEFAULT now(),
            outcome text,
            PRIMARY KEY (notification_uuid, routing_key, signed_date)
        ) PARTITION BY RANGE (signed_date)
        """,
        """
        CREATE TABLE notification_archive (
            notification_uuid text NOT NULL,
            routing_key text NOT NULL,
            notification_type text NOT NULL,
            subtype text,
            signed_date timestamptz NOT NULL,
            environment text NOT NULL,
            bundle_id text NOT NULL,
            original_transaction_id text,
            signed_payload text,
            payload jsonb,
            kafka_topic text,
            kafka_partition integer,
            kafka_offset bigint,
            received_at timestamptz,
            stored_at timestamptz NOT NULL DEFAULT now(),
            source text,
            header_sha256 bytea,
            body json,
            signature text,
            nested_header_sha256 bytea[],
            nested_bodies json[],
            nested_signatures text[],
            trace_id text,
            PRIMARY KEY (notification_uuid, routing_key, signed_date),
            CONSTRAINT notifications_archived CHECK (signed_payload IS NOT NULL OR body IS NOT NULL)
        ) PARTITION BY RANGE (signed_date)
        """,
        """
        DO $$
        BEGIN
            EXECUTE 'ALTER TABLE notification_archive ALTER COLUMN signed_payload SET COMPRESSION lz4, ALTER COLUMN payload SET COMPRESSION lz4,'
                || ' ALTER COLUMN body SET COMPRESSION lz4, ALTER COLUMN nested_bodies SET COMPRESSION lz4';
        EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
            RAISE NOTICE 'lz4 compression unavailable (%), archived payloads keep the default compression', SQLERRM;
        END
        $$
        """,
        """
        CREATE TABLE notification_deliveries (
            kafka_topic text NOT NULL,
            kafka_partition integer NOT NULL,
            kafka_offset bigint NOT NULL,
            notification_uuid text NOT NULL,
            routing_key text NOT NULL,
            signed_date timestamptz NOT NULL,
            source text,
            redriven boolean NOT NULL DEFAULT false,
            received_at timestamptz,
            stored_at timestamptz NOT NULL DEFAULT now(),
            trace_id text,
            PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset, routing_key, signed_date)
        ) PARTITION BY RANGE (signed_date)
        """,
        // Every month a row of the three tables needs, and the coming ones.
        """
        SELECT ensure_time_partition(t, 'month', m)
        FROM (VALUES ('notification_ledger'::regclass), ('notification_archive'::regclass), ('notification_deliveries'::regclass)) AS p(t),
            (SELECT DISTINCT date_trunc('month', coalesce(a.signed_date, l.first_seen_at) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
             FROM notification_ledger_unpartitioned l LEFT JOIN notification_archive_unpartitioned a USING (notification_uuid)
             UNION SELECT date_trunc('month', a.signed_date AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' FROM notification_archive_unpartitioned a
             UNION \(comingMonths)) AS months(m)
        """,
        """
        INSERT INTO notification_ledger (notification_uuid, routing_key, signed_date, first_seen_at, outcome)
        SELECT l.notification_uuid, coalesce(a.original_transaction_id, l.notification_uuid), coalesce(a.signed_date, l.first_seen_at),
            l.first_seen_at, l.outcome
        FROM notification_ledger_unpartitioned l LEFT JOIN notification_archive_unpartitioned a USING (notification_uuid)
        """,
        """
        INSERT INTO notification_archive (notification_uuid, routing_key, notification_type, subtype, signed_date, environment, bundle_id,
            original_transaction_id, signed_payload, payload, kafka_topic, kafka_partition, kafka_offset, received_at, stored_at, source,
            header_sha256, body, signature, nested_header_sha256, nested_bodies, nested_signatures, trace_id)
        SELECT notification_uuid, coalesce(original_transaction_id, notification_uuid), notification_type, subtype, signed_date, environment,
            bundle_id, original_transaction_id, signed_payload, payload, kafka_topic, kafka_partition, kafka_offset, received_at, stored_at,
            source, header_sha256, body, signature, nested_header_sha256, nested_bodies, nested_signatures, trace_id
        FROM notification_archive_unpartitioned
        """,
        // The ledger's rows whose notification was no longer archived (pruned by retention): their signedDate is
        // unknown (the copy above took first_seen_at), so their UUIDs are kept here as well, and the claim checks
        // them too (a backfill can bring back a notification of up to 180 days).
        "CREATE TABLE notification_ledger_undated (notification_uuid text PRIMARY KEY)",
        """
        INSERT INTO notification_ledger_undated (notification_uuid)
        SELECT l.notification_uuid FROM notification_ledger_unpartitioned l
        WHERE NOT EXISTS (SELECT 1 FROM notification_archive_unpartitioned a WHERE a.notification_uuid = l.notification_uuid)
        """,
        // A delivery whose notification is no longer archived (pruned) keeps the ledger's date.
        """
        INSERT INTO notification_deliveries (kafka_topic, kafka_partition, kafka_offset, notification_uuid, routing_key, signed_date, source,
            redriven, received_at, stored_at, trace_id)
        SELECT d.kafka_topic, d.kafka_partition, d.kafka_offset, d.notification_uuid, l.routing_key, l.signed_date, d.source, d.redriven,
            d.received_at, d.stored_at, d.trace_id
        FROM notification_deliveries_unpartitioned d
        JOIN notification_ledger l ON l.notification_uuid = d.notification_uuid
        """,
        "DROP TABLE notification_deliveries_unpartitioned",
        "DROP TABLE notification_archive_unpartitioned",
        "DROP TABLE notification_ledger_unpartitioned",
        "CREATE INDEX notification_archive_by_type ON notification_archive (notification_type, environment, bundle_id, signed_date)",
        "CREATE INDEX notification_archive_timeline ON notification_archive (original_transaction_id, bundle_id) INCLUDE (received_at, stored_at)",
        "CREATE INDEX notifications_by_subscription ON notification_archive (original_transaction_id, signed_date DESC)",
        "CREATE INDEX notification_archive_by_signed_date ON notification_archive (signed_date)",
        "CREATE INDEX notification_deliveries_by_notification ON notification_deliveries (notification_uuid)",
        "CREATE INDEX notification_deliveries_by_signed_date ON notification_deliveries (signed_date)",
        archivedPayloadTextFunction,
        archivedSignedPayloadFunction,
        archivedTransactionInfoFunction,
        notificationsView,
    ])
}
