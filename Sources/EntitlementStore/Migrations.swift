/// The database schema, as numbered migrations. Applied in order, each once, recorded in `schema_migrations`,
/// under a PostgreSQL advisory lock so that several workers starting at once do not race.
///
/// The schema is a contract with the app backends that read it (see docs/database-schema.md): columns are
/// added, never renamed or dropped without a new major version.
public enum Migrations {
    public struct Migration: Sendable {
        public var version: Int
        public var name: String
        public var sql: [String]
    }

    /// `entitlements_now` (each row with `is_active`: access until expiry plus the configured leeway, grace until its
    /// end or 28 days) and `entitlements_production_now`, as migrations 4 and 8 created them, and as 9 did with the
    /// bounded grant of a contradicted row. The SQL each migration ran is exactly this text: the views' `*` is fixed
    /// when they are created, so a migration that adds columns to `entitlements` recreates them.
    static func entitlementViews(contradictionGrants: Bool) -> [String] {
        let open = contradictionGrants ? "(CASE" : "CASE"
        let close = contradictionGrants ? "ELSE true END OR coalesce(e.contradiction_grants_until > now(), false))) AS is_active" : "ELSE true END) AS is_active"
        return [
            """
            CREATE VIEW entitlements_now AS
            SELECT e.*, (e.status IN ('active', 'gracePeriod') AND \(open)
                WHEN e.status = 'gracePeriod' AND e.grace_period_expires_at IS NOT NULL THEN e.grace_period_expires_at + s.leeway > now()
                WHEN e.status = 'gracePeriod' AND e.expires_at IS NOT NULL THEN e.expires_at + interval '28 days' + s.leeway > now()
                WHEN e.expires_at IS NOT NULL THEN e.expires_at + s.leeway > now()
                \(close)
            FROM entitlements e
            CROSS JOIN (SELECT COALESCE((SELECT expiry_leeway FROM entitlement_settings), interval '0') AS leeway) s
            """,
            "CREATE VIEW entitlements_production_now AS SELECT * FROM entitlements_now WHERE environment = 'Production'",
        ]
    }

    /// Advisory lock key for migrations (any constant; "apns" in ASCII).
    static let lockKey: Int64 = 0x6170_6E73

    public static let all: [Migration] = [
        Migration(version: 1, name: "notifications, ledger, entitlements, transactions", sql: [
            """
            CREATE TABLE notification_ledger (
                notification_uuid text PRIMARY KEY,
                first_seen_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            """
            CREATE TABLE notifications (
                notification_uuid text PRIMARY KEY REFERENCES notification_ledger (notification_uuid),
                notification_type text NOT NULL,
                subtype text,
                signed_date timestamptz NOT NULL,
                environment text NOT NULL,
                bundle_id text NOT NULL,
                original_transaction_id text,
                signed_payload text NOT NULL,
                payload jsonb NOT NULL,
                kafka_topic text,
                kafka_partition integer,
                kafka_offset bigint,
                received_at timestamptz,
                stored_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX notifications_by_subscription ON notifications (original_transaction_id, signed_date DESC)",
            """
            CREATE TABLE entitlements (
                environment text NOT NULL,
                bundle_id text NOT NULL,
                original_transaction_id text NOT NULL,
                product_id text,
                subscription_group_id text,
                status text NOT NULL,
                expires_at timestamptz,
                grace_period_expires_at timestamptz,
                auto_renew_status integer,
                auto_renew_product_id text,
                billing_issue_since timestamptz,
                revocation_date timestamptz,
                revocation_reason integer,
                revocation_type text,
                ownership_type text,
                offer_type integer,
                offer_identifier text,
                offer_discount_type text,
                app_account_token text,
                price bigint,
                currency text,
                last_notification_type text NOT NULL,
                last_notification_subtype text,
                last_signed_date timestamptz NOT NULL,
                apple_status integer,
                state jsonb NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (environment, bundle_id, original_transaction_id)
            )
            """,
            "CREATE INDEX entitlements_by_app_account_token ON entitlements (app_account_token)",
            """
            CREATE VIEW entitlements_now AS
            SELECT *, (status IN ('active', 'gracePeriod') AND CASE
                WHEN status = 'gracePeriod' AND grace_period_expires_at IS NOT NULL THEN grace_period_expires_at > now()
                WHEN expires_at IS NOT NULL THEN expires_at > now()
                ELSE true END) AS is_active
            FROM entitlements
            """,
            """
            CREATE TABLE transactions (
                transaction_id text PRIMARY KEY,
                original_transaction_id text NOT NULL,
                environment text NOT NULL,
                bundle_id text NOT NULL,
                product_id text,
                type text,
                purchase_date timestamptz,
                expires_date timestamptz,
                quantity integer,
                revocation_date timestamptz,
                revocation_reason integer,
                revocation_type text,
                price bigint,
                currency text,
                app_account_token text,
                ownership_type text,
                signed_date timestamptz NOT NULL,
                payload jsonb NOT NULL
            )
            """,
            "CREATE INDEX transactions_by_subscription ON transactions (original_transaction_id)",
        ]),
        Migration(version: 2, name: "dead-letter re-drive log", sql: [
            """
            CREATE TABLE dead_letter_redrives (
                dead_letter_topic text NOT NULL,
                dead_letter_partition integer NOT NULL,
                dead_letter_offset bigint NOT NULL,
                error_code text,
                redriven_to_topic text NOT NULL,
                redriven_to_partition integer NOT NULL,
                redriven_to_offset bigint NOT NULL,
                redriven_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (dead_letter_topic, dead_letter_partition, dead_letter_offset)
            )
            """,
        ]),
        // The raw JWS (~15 KB of base64) and the decoded payloads are stored out of line. PostgreSQL's default
        // pglz tries to compress each and gives up (base64 does not shrink by its 25 % bar): in the worker
        // benchmark that attempt was ~300 of the ~370 ms the archive insert of a 500-notification batch took.
        // lz4 (PostgreSQL ≥ 14) is ~5× faster and stores ~18 % less. A server built without lz4 keeps pglz.
        Migration(version: 3, name: "lz4 compression for archived payloads", sql: [
            """
            DO $$
            BEGIN
                EXECUTE 'ALTER TABLE notifications ALTER COLUMN signed_payload SET COMPRESSION lz4, ALTER COLUMN payload SET COMPRESSION lz4';
                EXECUTE 'ALTER TABLE transactions ALTER COLUMN payload SET COMPRESSION lz4';
            EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
                RAISE NOTICE 'lz4 compression unavailable (%), payloads keep the default compression', SQLERRM;
            END
            $$
            """,
        ]),
        // Entitlement correctness (which transaction the period reflects, ties of signedDate, revocation
        // percentage, family and bundle-migration links), the grace backstop and a configurable expiry leeway in
        // the view, and a production-only view. Columns are only added; the views are recreated (a view's `*`
        // is fixed when it is created, so new columns need a new view).
        Migration(version: 4, name: "entitlement periods, ordering, links; leeway and production views", sql: [
            """
            ALTER TABLE entitlements
                ADD COLUMN period_transaction_id text,
                ADD COLUMN period_purchase_date timestamptz,
                ADD COLUMN revocation_percentage integer,
                ADD COLUMN app_transaction_id text,
                ADD COLUMN previous_original_transaction_id text,
                ADD COLUMN superseded_by text,
                ADD COLUMN last_notification_uuid text,
                ADD COLUMN last_order_key text
            """,
            "CREATE INDEX entitlements_by_app_transaction_id ON entitlements (app_transaction_id)",
            """
            ALTER TABLE transactions
                ADD COLUMN revocation_percentage integer,
                ADD COLUMN app_transaction_id text
            """,
            """
            CREATE TABLE entitlement_settings (
                only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                expiry_leeway interval NOT NULL DEFAULT interval '2 minutes'
            )
            """,
            "INSERT INTO entitlement_settings DEFAULT VALUES",
            "DROP VIEW entitlements_now",
        ] + entitlementViews(contradictionGrants: false)),
        // Dead letters exactly once in effect: the original record's position is recorded in the batch transaction,
        // so a redelivered batch (rebalance, kill -9, replay) does not publish its dead letters again.
        Migration(version: 5, name: "dead-lettered record positions", sql: [
            """
            CREATE TABLE dead_lettered_records (
                original_topic text NOT NULL,
                original_partition integer NOT NULL,
                original_offset bigint NOT NULL,
                error_code text NOT NULL,
                dead_lettered_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (original_topic, original_partition, original_offset)
            )
            """,
        ]),
        // The pull side: a notification-history backfill's checkpoint, and where each archived notification came
        // from (`ingest`, or `history` for what a backfill fetched from Apple).
        Migration(version: 6, name: "backfill checkpoints; notification source", sql: [
            """
            CREATE TABLE backfill_runs (
                id bigserial PRIMARY KEY,
                arguments_key text NOT NULL,
                arguments jsonb NOT NULL,
                bundle_id text NOT NULL,
                environment text NOT NULL,
                start_date timestamptz NOT NULL,
                end_date timestamptz NOT NULL,
                pagination_token text,
                pages integer NOT NULL DEFAULT 0,
                fetched integer NOT NULL DEFAULT 0,
                produced integer NOT NULL DEFAULT 0,
                already_stored integer NOT NULL DEFAULT 0,
                new_notifications integer NOT NULL DEFAULT 0,
                started_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now(),
                completed_at timestamptz,
                outcome text,
                last_error text
            )
            """,
            // At most one unfinished run per set of arguments: rerunning the same command resumes it.
            "CREATE UNIQUE INDEX backfill_runs_unfinished ON backfill_runs (arguments_key) WHERE completed_at IS NULL",
            "ALTER TABLE notifications ADD COLUMN source text",
        ]),
        // Apple as the source of truth: pending consumption requests (answer within 12 hours), each customer's
        // transaction-history revision (an import asks only for what changed), and the reconcile/import checkpoints.
        Migration(version: 7, name: "consumption requests, history revisions, pull checkpoints", sql: [
            """
            CREATE TABLE consumption_requests (
                notification_uuid text PRIMARY KEY,
                environment text NOT NULL,
                bundle_id text NOT NULL,
                transaction_id text NOT NULL,
                original_transaction_id text,
                product_type text,
                reason text,
                requested_at timestamptz NOT NULL,
                deadline timestamptz NOT NULL,
                answered_at timestamptz,
                answer jsonb
            )
            """,
            "CREATE INDEX consumption_requests_pending ON consumption_requests (deadline) WHERE answered_at IS NULL",
            """
            CREATE TABLE transaction_history_revisions (
                environment text NOT NULL,
                bundle_id text NOT NULL,
                transaction_id text NOT NULL,
                revision text NOT NULL,
                transactions integer NOT NULL DEFAULT 0,
                updated_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (environment, bundle_id, transaction_id)
            )
            """,
            """
            CREATE TABLE pull_runs (
                id bigserial PRIMARY KEY,
                command text NOT NULL,
                arguments_key text NOT NULL,
                position integer NOT NULL DEFAULT 0,
                total integer NOT NULL DEFAULT 0,
                started_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now(),
                completed_at timestamptz,
                last_error text
            )
            """,
            "CREATE UNIQUE INDEX pull_runs_unfinished ON pull_runs (command, arguments_key) WHERE completed_at IS NULL",
        ]),
        // Entitlement-change events: the outbox the batch transaction writes and the relay publishes, and per
        // subscription the last event's sequence and `after` (the next event's `before`, field for field).
        Migration(version: 8, name: "entitlement events outbox; per-subscription event sequence", sql: [
            """
            CREATE TABLE entitlement_events_outbox (
                id bigserial PRIMARY KEY,
                event_id text NOT NULL UNIQUE,
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
                published_at timestamptz
            )
            """,
            "CREATE INDEX entitlement_events_outbox_unpublished ON entitlement_events_outbox (id) WHERE published_at IS NULL",
            "CREATE INDEX entitlement_events_outbox_published ON entitlement_events_outbox (published_at) WHERE published_at IS NOT NULL",
            """
            ALTER TABLE entitlements
                ADD COLUMN event_sequence bigint,
                ADD COLUMN last_event_after jsonb
            """,
            // The views' `*` is fixed when they are created: recreated so that they show the new columns.
            "DROP VIEW entitlements_production_now",
            "DROP VIEW entitlements_now",
        ] + entitlementViews(contradictionGrants: false)),
        // Rows that contradict Apple's last word: why and since when, the bounded grant while Apple says active,
        // and when the self-healing status pull last asked Apple about the row. The views grant access until the
        // backstop (recreated once more, so that they also show the new columns).
        Migration(version: 9, name: "contradicted entitlements: reason, since, bounded grant, last pull", sql: [
            """
            ALTER TABLE entitlements
                ADD COLUMN contradiction text,
                ADD COLUMN contradicted_since timestamptz,
                ADD COLUMN contradiction_grants_until timestamptz,
                ADD COLUMN contradiction_pulled_at timestamptz
            """,
            "CREATE INDEX entitlements_contradicted ON entitlements (contradicted_since) WHERE contradiction IS NOT NULL",
            "DROP VIEW entitlements_production_now",
            "DROP VIEW entitlements_now",
        ] + entitlementViews(contradictionGrants: true)),
        // The customer API's keys: only the SHA-256 of each key is stored (the key is shown once at creation).
        Migration(version: 10, name: "customer API keys", sql: [
            """
            CREATE TABLE api_keys (
                id text PRIMARY KEY,
                name text NOT NULL,
                secret_sha256 bytea NOT NULL,
                scope text NOT NULL CHECK (scope IN ('read', 'write')),
                bundle_ids text[] NOT NULL DEFAULT '{}',
                created_at timestamptz NOT NULL DEFAULT now(),
                revoked_at timestamptz,
                last_used_at timestamptz
            )
            """,
        ]),
        // The customer API's purchases and who owns what. Ownership is ours, not Apple's appAccountToken (a transfer
        // does not change the token Apple's later notifications carry); every change of owner is a transfer row.
        Migration(version: 11, name: "customer purchases, ownership, transfers", sql: [
            """
            CREATE TABLE customer_ownership (
                environment text NOT NULL,
                bundle_id text NOT NULL,
                original_transaction_id text NOT NULL,
                customer_id text NOT NULL,
                via text NOT NULL CHECK (via IN ('token', 'bound', 'transferred')),
                since timestamptz NOT NULL DEFAULT now(),
                apple_token_status text,
                PRIMARY KEY (environment, bundle_id, original_transaction_id)
            )
            """,
            "CREATE INDEX customer_ownership_by_customer ON customer_ownership (bundle_id, customer_id)",
            """
            CREATE TABLE customer_transfers (
                id bigserial PRIMARY KEY,
                environment text NOT NULL,
                bundle_id text NOT NULL,
                original_transaction_id text NOT NULL,
                from_customer_id text,
                to_customer_id text NOT NULL,
                policy text NOT NULL,
                purchase_key text NOT NULL,
                transferred_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX customer_transfers_by_subscription ON customer_transfers (bundle_id, original_transaction_id)",
            """
            CREATE TABLE customer_purchases (
                purchase_key text PRIMARY KEY,
                environment text NOT NULL,
                bundle_id text NOT NULL,
                transaction_id text NOT NULL,
                original_transaction_id text NOT NULL,
                customer_id text NOT NULL,
                policy text NOT NULL,
                status text NOT NULL CHECK (status IN ('pending', 'accepted', 'conflict')),
                decision text,
                requested_at timestamptz NOT NULL DEFAULT now(),
                applied_at timestamptz
            )
            """,
            "CREATE INDEX customer_purchases_by_transaction ON customer_purchases (bundle_id, transaction_id, requested_at DESC)",
            "CREATE INDEX transactions_by_app_account_token ON transactions (bundle_id, lower(app_account_token)) WHERE app_account_token IS NOT NULL",
            "CREATE INDEX entitlements_by_lower_app_account_token ON entitlements (bundle_id, lower(app_account_token)) WHERE app_account_token IS NOT NULL",
        ]),
        // Webhooks: endpoints (with their signing secrets: an HMAC key must be kept to sign, so no hash serves
        // here), one delivery row per (endpoint, event) in topic order, and every attempt's outcome.
        Migration(version: 12, name: "webhook endpoints, deliveries, attempts", sql: [
            """
            CREATE TABLE webhook_endpoints (
                id text PRIMARY KEY,
                url text NOT NULL,
                description text,
                bundle_ids text[] NOT NULL DEFAULT '{}',
                environment text,
                event_types text[] NOT NULL DEFAULT '{}',
                allow_http boolean NOT NULL DEFAULT false,
                secret text NOT NULL,
                previous_secret text,
                previous_secret_until timestamptz,
                enabled boolean NOT NULL DEFAULT true,
                disabled_reason text,
                dead_in_a_row int NOT NULL DEFAULT 0,
                created_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            """
            CREATE TABLE webhook_deliveries (
                id bigserial PRIMARY KEY,
                endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
                event_id text NOT NULL,
                event_type text NOT NULL,
                subject text NOT NULL,
                event_time timestamptz NOT NULL,
                kafka_partition int NOT NULL,
                kafka_offset bigint NOT NULL,
                body text NOT NULL,
                status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
                attempts int NOT NULL DEFAULT 0,
                next_attempt_at timestamptz NOT NULL DEFAULT now(),
                leased_until timestamptz,
                last_status int,
                last_error text,
                last_latency_ms int,
                response_excerpt text,
                created_at timestamptz NOT NULL DEFAULT now(),
                finished_at timestamptz,
                UNIQUE (endpoint_id, event_id)
            )
            """,
            // The heads of each (endpoint, subscription) chain: the oldest pending delivery by topic position.
            "CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, subject, kafka_partition, kafka_offset) WHERE status = 'pending'",
            "CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_id, created_at DESC)",
            "CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at) WHERE status <> 'pending'",
            """
            CREATE TABLE webhook_attempts (
                id bigserial PRIMARY KEY,
                delivery_id bigint NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
                attempted_at timestamptz NOT NULL DEFAULT now(),
                status int,
                latency_ms int NOT NULL,
                error text,
                response_excerpt text
            )
            """,
            "CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (delivery_id, attempted_at)",
        ]),
        // The archive taken apart (ArchivedJWS): each JWS header segment (a certificate chain, ≈5.4 KB, three per
        // notification) stored once by its SHA-256; payloads as the JSON text they encode (`json` keeps the text
        // byte for byte), nested JWSs as placeholders in the outer payload. The table becomes
        // `notification_archive`; `notifications` becomes a view with the columns it always had, the exact
        // `signed_payload` and the decoded `payload` rebuilt for every row, so what reads it keeps working. Rows
        // written before, or that do not take apart exactly, keep `signed_payload` and `payload`; `pipelinectl
        // archive compact` moves existing rows in small transactions. Only metadata changes here (no column
        // default, a NOT VALID check, a rename): the table is not rewritten or scanned under a lock.
        Migration(version: 13, name: "archive: certificate chains once, payloads as JSON text", sql: [
            """
            CREATE TABLE jws_headers (
                sha256 bytea PRIMARY KEY,
                segment text NOT NULL,
                first_seen_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            """
            ALTER TABLE notifications
                ALTER COLUMN signed_payload DROP NOT NULL,
                ALTER COLUMN payload DROP NOT NULL,
                ADD COLUMN header_sha256 bytea,
                ADD COLUMN body json,
                ADD COLUMN signature text,
                ADD COLUMN nested_header_sha256 bytea[],
                ADD COLUMN nested_bodies json[],
                ADD COLUMN nested_signatures text[]
            """,
            "ALTER TABLE notifications ADD CONSTRAINT notifications_archived CHECK (signed_payload IS NOT NULL OR body IS NOT NULL) NOT VALID",
            "ALTER TABLE notifications RENAME TO notification_archive",
            """
            DO $$
            BEGIN
                EXECUTE 'ALTER TABLE notification_archive ALTER COLUMN body SET COMPRESSION lz4, ALTER COLUMN nested_bodies SET COMPRESSION lz4';
            EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
                RAISE NOTICE 'lz4 compression unavailable (%), archived bodies keep the default compression', SQLERRM;
            END
            $$
            """,
            // Canonical base64url without padding (encode() breaks lines every 76 characters: translate drops them).
            """
            CREATE FUNCTION jws_base64url(t text) RETURNS text IMMUTABLE STRICT LANGUAGE sql AS $$
                SELECT rtrim(translate(encode(convert_to(t, 'UTF8'), 'base64'), E'+/\\n', '-_'), '=')
            $$
            """,
            // The outer payload's exact JSON text, nested JWSs back in place (ArchivedJWS.outerPayload in SQL).
            archivedPayloadTextFunction,
            // The exact signedPayload Apple signed, whichever way the row is stored.
            archivedSignedPayloadFunction,
            // The archive as it always read: the exact JWS and the decoded outer payload, for any row, in the columns
            // (and the order) of migrations 1-12.
            notificationsView,
        ]),
        metrics,
        // Webhook attempts are fenced: a claim writes a fresh token, an attempt records its outcome only while the row
        // still carries it. Only a nullable column is added: no rewrite, no scan under a lock.
        Migration(version: 15, name: "webhook deliveries: lease token", sql: [
            "ALTER TABLE webhook_deliveries ADD COLUMN lease_token uuid",
        ]),
        console,
        tracing,
        erasure,
        extensions,
        privacy,
        partitions,
        routingKeys,
        appStoreBudget,
        offers,
        deadLetterClaims,
        tokenStatistics,
        metricRollups,
        eventPartitions,
    ]
}
