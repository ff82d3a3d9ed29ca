extension Migrations {
    /// Erasure and retention (docs/privacy.md).
    ///
    /// - `erasure_requests`: one row per erasure, whoever asked (pipelinectl, the customer API, the console, a
    ///   RESCIND_CONSENT): the subject only as its keyed digest. `pending_subject` holds the identifier in clear only
    ///   while a request queued by the worker (RESCIND_CONSENT) waits to run, and is cleared by the erasure itself.
    /// - `erasure_suppressions`: one keyed digest (HMAC-SHA256, `ErasureKey`) per erased identifier with the erasure
    ///   time: what keeps a replay, backfill, reconcile, import or re-drive from bringing the customer back.
    /// - `erasure_keys`: the fingerprints of the keys the digests were made with, so a worker holding no key or
    ///   another one stops instead of missing them.
    /// - `erased_events`: the ids of the customer's events that were erased, so the webhooks service creates no
    ///   delivery for one it reads from the events topic afterwards (pruned after the topic's retention).
    ///
    /// The indexes are those erasure and the prune job search by; `notification_archive_by_stored_at` is built with
    /// a lock on writes to the archive for the time it takes (seconds per million rows).
    static let erasure = Migration(version: 18, name: "erasure requests, suppressions; retention indexes", sql: [
        """
        CREATE TABLE erasure_requests (
            request_id text PRIMARY KEY,
            bundle_id text NOT NULL,
            subject_kind text NOT NULL,
            subject_digest bytea NOT NULL,
            reason text NOT NULL,
            requested_by text NOT NULL,
            status text NOT NULL CHECK (status IN ('pending', 'completed')),
            pending_subject text,
            requested_at timestamptz NOT NULL DEFAULT now(),
            completed_at timestamptz,
            summary jsonb,
            CHECK (status = 'pending' OR pending_subject IS NULL)
        )
        """,
        "CREATE INDEX erasure_requests_pending ON erasure_requests (requested_at) WHERE status = 'pending'",
        """
        CREATE TABLE erasure_suppressions (
            digest bytea PRIMARY KEY,
            bundle_id text NOT NULL,
            kind text NOT NULL,
            key_id text NOT NULL,
            erased_at timestamptz NOT NULL,
            request_id text NOT NULL
        )
        """,
        "CREATE TABLE erasure_keys (key_id text PRIMARY KEY, first_used_at timestamptz NOT NULL DEFAULT now())",
        "CREATE TABLE erased_events (event_id text PRIMARY KEY, erased_at timestamptz NOT NULL DEFAULT now())",
        "CREATE INDEX erased_events_by_time ON erased_events (erased_at)",
        "CREATE INDEX customer_purchases_by_customer ON customer_purchases (bundle_id, customer_id)",
        "CREATE INDEX customer_purchases_by_subscription ON customer_purchases (original_transaction_id)",
        "CREATE INDEX customer_purchases_by_time ON customer_purchases (requested_at)",
        "CREATE INDEX customer_transfers_by_customer ON customer_transfers (bundle_id, from_customer_id, to_customer_id)",
        "CREATE INDEX customer_transfers_to_customer ON customer_transfers (bundle_id, to_customer_id)",
        "CREATE INDEX consumption_requests_by_subscription ON consumption_requests (original_transaction_id)",
        "CREATE INDEX webhook_deliveries_by_subject ON webhook_deliveries (subject)",
        "CREATE INDEX console_audit_by_customer ON console_audit (customer_id) WHERE customer_id IS NOT NULL",
        "CREATE INDEX console_audit_by_time ON console_audit (at)",
        "CREATE INDEX notification_archive_by_stored_at ON notification_archive (stored_at)",
        // The customer API's erase scope: a key of its own, never implied by write.
        "ALTER TABLE api_keys DROP CONSTRAINT api_keys_scope_check",
        "ALTER TABLE api_keys ADD CONSTRAINT api_keys_scope_check CHECK (scope IN ('read', 'write', 'erase'))",
        "CREATE INDEX transactions_by_app_transaction_id ON transactions (app_transaction_id) WHERE app_transaction_id IS NOT NULL",
    ])
}
