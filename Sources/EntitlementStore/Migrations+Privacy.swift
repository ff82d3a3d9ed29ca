extension Migrations {
    /// Privacy hardening (docs/privacy.md):
    ///
    /// - Erasure request ids are scoped by app: the key is `(bundle_id, request_id)`, so another tenant's id is no
    ///   existence oracle and a predictable id cannot be squatted across apps.
    /// - The columns an erasure resolves and deletes by get indexes, so an erasure (which holds its exclusive lock
    ///   only around the part that must be atomic with the workers' batches) never scans a table: the subscription
    ///   chain both ways, the entitlements, ownership and history revisions by subscription without the
    ///   environment, the outbox's `consent.rescinded` by subject, the console audit by customer as compared.
    static let privacy = Migration(version: 20, name: "privacy: erasure ids per app; indexes erasure searches by", sql: [
        "ALTER TABLE erasure_requests DROP CONSTRAINT erasure_requests_pkey",
        "ALTER TABLE erasure_requests ADD PRIMARY KEY (bundle_id, request_id)",
        "CREATE INDEX entitlements_by_subscription ON entitlements (bundle_id, original_transaction_id)",
        """
        CREATE INDEX entitlements_by_previous_subscription ON entitlements (bundle_id, previous_original_transaction_id)
            WHERE previous_original_transaction_id IS NOT NULL
        """,
        "CREATE INDEX entitlements_by_superseded_by ON entitlements (bundle_id, superseded_by) WHERE superseded_by IS NOT NULL",
        "CREATE INDEX entitlement_events_outbox_by_subject ON entitlement_events_outbox (bundle_id, event_type, subject)",
        "CREATE INDEX customer_ownership_by_subscription ON customer_ownership (bundle_id, original_transaction_id)",
        "CREATE INDEX transaction_history_revisions_by_transaction ON transaction_history_revisions (bundle_id, transaction_id)",
        "CREATE INDEX console_audit_by_lower_customer ON console_audit (lower(customer_id)) WHERE customer_id IS NOT NULL",
        "CREATE INDEX transactions_by_bundle_subscription ON transactions (bundle_id, original_transaction_id)",
        // The console re-drives a dead letter exactly as `pipelinectl dlq redrive` does: it needs the dead letter's
        // own position (for the one re-drive log) and its headers (ingest's, the record kind, the re-drive count).
        """
        ALTER TABLE dead_lettered_records ADD COLUMN dead_letter_topic text, ADD COLUMN dead_letter_partition integer,
            ADD COLUMN dead_letter_offset bigint, ADD COLUMN dead_letter_headers jsonb
        """,
    ])
}
