/// A table moved from one heap to time partitions by copying it into a partitioned twin (`<table>_partitioned`) and
/// swapping the two: the outbox and the webhook tables (migration 28). The same statements serve both ways of doing
/// it: inside the migration's transaction (the writers wait; right for a small table), or online beforehand
/// (`OnlineRepartition`, `pipelinectl migrate online`: the twin is made and filled in batches beside the running
/// writers, a trigger on the old table mirrors what they write meanwhile, and the migration then only copies the
/// little that is left and swaps).
public struct RepartitionedTable: Sendable {
    /// The table, as the code names it.
    public let table: String
    /// The column whose time decides the partition, and the partitions' length (`day` or `month`).
    public let partitionColumn: String
    public let period: String
    /// The twin's columns, in order, and for each the value it takes from a row of the old table; `%` stands for
    /// that row (`s` in the batch copy, `NEW` in the mirroring trigger).
    public let columns: [(name: String, value: String)]
    /// The twin's primary key (the old one with the partition column).
    public let key: [String]
    /// The twin's table and indexes, each statement made idempotent (`IF NOT EXISTS`).
    public let twinDefinition: [String]
    /// The old table's index and constraint names, which the twin's take at the swap.
    public let renamedIndexes: [String]

    /// The partitioned twin's name until the swap.
    public var twin: String { table + "_partitioned" }

    func values(of row: String) -> String {
        columns.map { $0.value.replacingOccurrences(of: "%", with: row) }.joined(separator: ", ")
    }

    var columnList: String { columns.map(\.name).joined(separator: ", ") }

    /// The twin's partitions for the old table's rows with `id` above `after` (an SQL expression): the months
    /// they fall in, or for the day-partitioned outbox one partition for all days before today (an outbox holds
    /// days to months of rows; a partition per day of them would only be dropped again) and today's. With the
    /// coming two periods. After an online copy (a progress row) the outbox's earlier days are not read again: the
    /// swap runs this under its lock.
    public var partitionsForRows: [String] {
        if period == "day" {
            return ["""
                SELECT ensure_partition_range('\(twin)', '\(twin)_until_' || to_char(today, 'YYYY_MM_DD'), earliest, today)
                FROM (SELECT date_trunc('day', min(created_at) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS earliest,
                    date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS today FROM \(table)
                    WHERE NOT EXISTS (SELECT 1 FROM online_repartition_progress p WHERE p.table_name = '\(table)')) x
                WHERE earliest < today
                """,
                "SELECT ensure_time_partition_for('\(twin)', 'day', now() + d * interval '1 day') FROM generate_series(0, 2) AS d",
            ]
        }
        return [afterCopied("""
            SELECT ensure_time_partition_for('\(twin)', 'month', m)
            FROM (SELECT DISTINCT date_trunc('month', \(partitionSource) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS m FROM \(sourceFrom) WHERE s.id > %s
                UNION SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + k * interval '1 month' FROM generate_series(0, 2) AS k) x
            """)]
    }

    /// `statement` run for the old table's rows above what the online copy got through (0 when it did not run):
    /// `%s` is that id, written into the statement as a constant, so the planner reads the few rows above it by
    /// the primary key under the swap's lock instead of estimating a third of the table and scanning it all.
    func afterCopied(_ statement: String) -> String {
        """
        DO $migration$
        BEGIN
            EXECUTE format($statement$\(statement)$statement$,
                coalesce((SELECT copied_through FROM online_repartition_progress WHERE table_name = '\(table)'), 0));
        END
        $migration$
        """
    }

    /// The old table's rows as the copy reads them (`s`; the attempts with their delivery's `event_time`).
    var sourceFrom: String {
        table == "webhook_attempts"
            ? "webhook_attempts s JOIN webhook_deliveries d ON d.id = s.delivery_id AND d.subject = s.subject"
            : "\(table) s"
    }

    /// The partition column's value for a row of the old table (`s`).
    var partitionSource: String {
        columns.first { $0.name == partitionColumn }!.value.replacingOccurrences(of: "%", with: "s")
    }

    /// One batch of the copy: the next `$2` rows of the old table by id after `$1` (a row the trigger already
    /// mirrored is left as the trigger wrote it). Answers the last id read, the rows read and those inserted.
    public var copyBatch: String {
        """
        WITH src AS (SELECT s.id AS source_id, \(values(of: "s")) FROM \(sourceFrom) WHERE s.id > $1 ORDER BY s.id LIMIT $2),
        inserted AS (INSERT INTO \(twin) (\(columnList)) SELECT \(columnList) FROM src ON CONFLICT DO NOTHING RETURNING 1)
        SELECT coalesce(max(source_id), $1)::bigint, count(*)::bigint, (SELECT count(*) FROM inserted)::bigint FROM src
        """
    }

    /// What the copy in batches left: every row above the copied id (all of them when nothing was copied online).
    public var copyRest: String {
        afterCopied("""
            INSERT INTO \(twin) (\(columnList))
            SELECT \(values(of: "s")) FROM \(sourceFrom) WHERE s.id > %s
            ON CONFLICT DO NOTHING
            """)
    }

    /// The trigger function that mirrors each write to the old table into the twin while the copy runs: an insert
    /// or update as an upsert (a row the copy had not reached yet is inserted, and the copy then leaves it), a
    /// delete as a delete plus a tombstone the swap applies again (the copy may have read the row before it went).
    /// A row of a period the twin has no partition for yet makes it first.
    public var mirrorFunction: String {
        let updates = columns.map(\.name).filter { !key.contains($0) }.map { "\($0) = EXCLUDED.\($0)" }.joined(separator: ", ")
        let upsert = """
            INSERT INTO \(twin) (\(columnList)) SELECT \(values(of: "NEW"))
                ON CONFLICT (\(key.joined(separator: ", "))) DO UPDATE SET \(updates)
            """
        return """
            CREATE OR REPLACE FUNCTION \(table)_mirror() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'DELETE' THEN
                    DELETE FROM \(twin) WHERE id = OLD.id AND subject = OLD.subject;
                    INSERT INTO online_repartition_deleted (table_name, id, subject) VALUES ('\(table)', OLD.id, OLD.subject) ON CONFLICT DO NOTHING;
                    RETURN OLD;
                END IF;
                BEGIN
                    \(upsert);
                EXCEPTION WHEN check_violation THEN
                    PERFORM ensure_time_partition_for('\(twin)', '\(period)', \(columns.first { $0.name == partitionColumn }!.value.replacingOccurrences(of: "%", with: "NEW")));
                    \(upsert);
                END;
                RETURN NEW;
            END
            $$
            """
    }

    /// The swap, in the migration's transaction: the tombstones applied, the old table dropped (its sequence kept
    /// for the twin), the twin renamed with its indexes, constraints and partitions.
    public var swap: [String] {
        [
            """
            DELETE FROM \(twin) t USING online_repartition_deleted d
            WHERE d.table_name = '\(table)' AND t.id = d.id AND t.subject = d.subject
            """,
            "ALTER SEQUENCE \(table)_id_seq OWNED BY NONE",
            "DROP TABLE \(table)",
            "DROP FUNCTION IF EXISTS \(table)_mirror()",
            "ALTER TABLE \(twin) RENAME TO \(table)",
            "ALTER SEQUENCE \(table)_id_seq OWNED BY \(table).id",
        ] + renamedIndexes.map { "ALTER INDEX \(twin)_\($0.dropFirst(table.count + 1)) RENAME TO \($0)" } + [
            """
            DO $$
            DECLARE p record;
            BEGIN
                FOR p IN SELECT c.relname::text AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                         WHERE i.inhparent = '\(table)'::regclass AND c.relname LIKE '\(twin)\\_%'
                LOOP
                    EXECUTE format('ALTER TABLE %I RENAME TO %I', p.name, '\(table)' || substr(p.name, \(twin.count + 1)));
                END LOOP;
                -- The partitions' own indexes, named after the twin's partitions when they were made.
                FOR p IN SELECT c.relname::text AS name FROM pg_class c
                         WHERE c.relkind IN ('i', 'I') AND c.relname LIKE '\(twin)\\_%'
                LOOP
                    EXECUTE format('ALTER INDEX %I RENAME TO %I', p.name, '\(table)' || substr(p.name, \(twin.count + 1)));
                END LOOP;
            END
            $$
            """,
        ]
    }

    /// The outbox, by day of `created_at` (when the worker's transaction wrote the event): an event is written once
    /// per real change, so `(event_id, subject, created_at)` loses nothing of `(event_id, subject)`'s uniqueness.
    public static let outbox = RepartitionedTable(
        table: "entitlement_events_outbox", partitionColumn: "created_at", period: "day",
        columns: ["id", "event_id", "event_type", "source", "subject", "event_time", "sequence", "environment", "bundle_id",
                  "original_transaction_id", "data", "created_at", "published_at", "traceparent"].map { ($0, "%.\($0)") },
        key: ["id", "subject", "created_at"],
        twinDefinition: [
            """
            CREATE TABLE IF NOT EXISTS entitlement_events_outbox_partitioned (
                id bigint NOT NULL DEFAULT nextval('entitlement_events_outbox_id_seq'),
                event_id text NOT NULL,
                event_type text NOT NULL,
                source text NOT NULL,
                subject text NOT NULL,
                event_time timestamptz NOT NULL,
                sequence bigint,
                environment text NOT NULL,
                bundle_id text NOT NULL,
                original_transaction_id text,
                data text NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                published_at timestamptz,
                traceparent text,
                CONSTRAINT entitlement_events_outbox_partitioned_pkey PRIMARY KEY (id, subject, created_at),
                CONSTRAINT entitlement_events_outbox_partitioned_event_id_key UNIQUE (event_id, subject, created_at)
            ) PARTITION BY RANGE (created_at)
            """,
            "CREATE INDEX IF NOT EXISTS entitlement_events_outbox_partitioned_unpublished ON entitlement_events_outbox_partitioned (id) WHERE published_at IS NULL",
            "CREATE INDEX IF NOT EXISTS entitlement_events_outbox_partitioned_published ON entitlement_events_outbox_partitioned (published_at) WHERE published_at IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS entitlement_events_outbox_partitioned_by_subscription ON entitlement_events_outbox_partitioned (original_transaction_id, id)",
            "CREATE INDEX IF NOT EXISTS entitlement_events_outbox_partitioned_by_subject ON entitlement_events_outbox_partitioned (bundle_id, event_type, subject)",
        ],
        renamedIndexes: [
            "entitlement_events_outbox_pkey", "entitlement_events_outbox_event_id_key", "entitlement_events_outbox_unpublished",
            "entitlement_events_outbox_published", "entitlement_events_outbox_by_subscription", "entitlement_events_outbox_by_subject",
        ])

    /// The webhook deliveries, by month of the event's `event_time`: the webhooks service reads the events topic at
    /// least once, and only the event's own time is the same when it reads an event again, so only with it does
    /// `(endpoint_id, event_id, subject, event_time)` refuse the second delivery. Months, not days: a backfill's
    /// events carry times years back, and a day each would make a thousand partitions.
    public static let webhookDeliveries = RepartitionedTable(
        table: "webhook_deliveries", partitionColumn: "event_time", period: "month",
        columns: ["id", "endpoint_id", "event_id", "event_type", "subject", "event_time", "kafka_partition", "kafka_offset", "body", "status",
                  "attempts", "next_attempt_at", "leased_until", "last_status", "last_error", "last_latency_ms", "response_excerpt",
                  "created_at", "finished_at", "lease_token", "traceparent"].map { ($0, "%.\($0)") },
        key: ["id", "subject", "event_time"],
        twinDefinition: [
            """
            CREATE TABLE IF NOT EXISTS webhook_deliveries_partitioned (
                id bigint NOT NULL DEFAULT nextval('webhook_deliveries_id_seq'),
                endpoint_id text NOT NULL CONSTRAINT webhook_deliveries_endpoint_id_fkey REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
                event_id text NOT NULL,
                event_type text NOT NULL,
                subject text NOT NULL,
                event_time timestamptz NOT NULL,
                kafka_partition int NOT NULL,
                kafka_offset bigint NOT NULL,
                body text NOT NULL,
                status text NOT NULL DEFAULT 'pending' CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'dead')),
                attempts int NOT NULL DEFAULT 0,
                next_attempt_at timestamptz NOT NULL DEFAULT now(),
                leased_until timestamptz,
                last_status int,
                last_error text,
                last_latency_ms int,
                response_excerpt text,
                created_at timestamptz NOT NULL DEFAULT now(),
                finished_at timestamptz,
                lease_token uuid,
                traceparent text,
                CONSTRAINT webhook_deliveries_partitioned_pkey PRIMARY KEY (id, subject, event_time),
                CONSTRAINT webhook_deliveries_partitioned_endpoint_id_event_id_key UNIQUE (endpoint_id, event_id, subject, event_time)
            ) PARTITION BY RANGE (event_time)
            """,
            """
            CREATE INDEX IF NOT EXISTS webhook_deliveries_partitioned_pending ON webhook_deliveries_partitioned
                (endpoint_id, subject, kafka_partition, kafka_offset) WHERE status = 'pending'
            """,
            "CREATE INDEX IF NOT EXISTS webhook_deliveries_partitioned_by_endpoint ON webhook_deliveries_partitioned (endpoint_id, created_at DESC)",
            "CREATE INDEX IF NOT EXISTS webhook_deliveries_partitioned_finished ON webhook_deliveries_partitioned (finished_at) WHERE status <> 'pending'",
            "CREATE INDEX IF NOT EXISTS webhook_deliveries_partitioned_by_event ON webhook_deliveries_partitioned (event_id)",
            "CREATE INDEX IF NOT EXISTS webhook_deliveries_partitioned_by_subject ON webhook_deliveries_partitioned (subject)",
        ],
        renamedIndexes: [
            "webhook_deliveries_pkey", "webhook_deliveries_endpoint_id_event_id_key", "webhook_deliveries_pending", "webhook_deliveries_by_endpoint",
            "webhook_deliveries_finished", "webhook_deliveries_by_event", "webhook_deliveries_by_subject",
        ])

    /// The attempts, in their delivery's month (they carry its `event_time`). No foreign key to the deliveries
    /// any more: PostgreSQL 15 cannot add one to a partitioned table without checking every row under the swap's
    /// lock, and retention drops a month of attempts with its month of deliveries; the statements that delete
    /// deliveries delete their attempts in the same statement.
    public static let webhookAttempts = RepartitionedTable(
        table: "webhook_attempts", partitionColumn: "event_time", period: "month",
        columns: ["id", "delivery_id", "attempted_at", "status", "latency_ms", "error", "response_excerpt", "trace_id", "subject"].map { ($0, "%.\($0)") }
            + [("event_time", "(SELECT d.event_time FROM webhook_deliveries d WHERE d.id = %.delivery_id AND d.subject = %.subject)")],
        key: ["id", "subject", "event_time"],
        twinDefinition: [
            """
            CREATE TABLE IF NOT EXISTS webhook_attempts_partitioned (
                id bigint NOT NULL DEFAULT nextval('webhook_attempts_id_seq'),
                delivery_id bigint NOT NULL,
                attempted_at timestamptz NOT NULL DEFAULT now(),
                status int,
                latency_ms int NOT NULL,
                error text,
                response_excerpt text,
                trace_id text,
                subject text NOT NULL,
                event_time timestamptz NOT NULL,
                CONSTRAINT webhook_attempts_partitioned_pkey PRIMARY KEY (id, subject, event_time)
            ) PARTITION BY RANGE (event_time)
            """,
            "CREATE INDEX IF NOT EXISTS webhook_attempts_partitioned_by_delivery ON webhook_attempts_partitioned (delivery_id, attempted_at)",
        ],
        renamedIndexes: ["webhook_attempts_pkey", "webhook_attempts_by_delivery"])

    /// In the order they are copied and swapped (the attempts read their deliveries' times; the old attempts go
    /// before the old deliveries they referenced).
    public static let eventTables = [webhookAttempts, webhookDeliveries, outbox]
}

extension Migrations {
    /// What both the migration and `pipelinectl migrate online` need first: the copy's bookkeeping (how far the
    /// copy in batches got, and the rows deleted meanwhile) and the partition functions.
    public static let repartitionSupport: [String] = [
        "CREATE TABLE IF NOT EXISTS online_repartition_progress (table_name text PRIMARY KEY, copied_through bigint NOT NULL DEFAULT 0, started_at timestamptz NOT NULL DEFAULT now())",
        "CREATE TABLE IF NOT EXISTS online_repartition_deleted (table_name text NOT NULL, id bigint NOT NULL, subject text NOT NULL, PRIMARY KEY (table_name, id, subject))",
        // A partition of arbitrary bounds, made and attached as ensure_time_partition makes one.
        """
        CREATE OR REPLACE FUNCTION ensure_partition_range(parent regclass, partition_name text, lower_bound timestamptz, upper_bound timestamptz)
        RETURNS text VOLATILE LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtext('ensure_time_partition'), hashtext(partition_name));
            IF NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = parent AND c.relname = partition_name) THEN
                EXECUTE format('CREATE TABLE IF NOT EXISTS %I (LIKE %s INCLUDING ALL)', partition_name, parent);
                EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, partition_name, lower_bound, upper_bound);
            END IF;
            RETURN partition_name;
        END
        $$
        """,
        // The period's partition of `at`, unless a partition of `parent` already holds `at` (the outbox's partition
        // of the days before its migration holds many days under another name).
        """
        CREATE OR REPLACE FUNCTION ensure_time_partition_for(parent regclass, period text, at timestamptz) RETURNS text VOLATILE LANGUAGE plpgsql AS $$
        DECLARE covering text;
        BEGIN
            SELECT c.relname::text INTO covering FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = parent
              AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz <= at
              AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz > at;
            IF covering IS NOT NULL THEN
                RETURN covering;
            END IF;
            RETURN ensure_time_partition(parent, period, at);
        END
        $$
        """,
    ]

    /// The outbox by day of `created_at`, the webhook deliveries and attempts by month of the event's time
    /// (`RepartitionedTable`; docs/scale.md). Copied inside this transaction (writes to the three tables wait),
    /// unless `pipelinectl migrate online` copied them beforehand: then only what its last batch left, and the swap.
    public static let eventPartitions = Migration(
        version: 28, name: "outbox and webhook tables: time partitions",
        sql: repartitionSupport
            + ["LOCK TABLE webhook_attempts, webhook_deliveries, entitlement_events_outbox IN ACCESS EXCLUSIVE MODE"]
            + RepartitionedTable.eventTables.flatMap { table in table.twinDefinition + table.partitionsForRows + [table.copyRest] }
            + RepartitionedTable.eventTables.flatMap(\.swap)
            + ["DROP TABLE online_repartition_deleted", "DROP TABLE online_repartition_progress"])
}
