extension Migrations {
    /// Renewal-date extensions asked of Apple (`pipelinectl extend`): one row per request identifier, written before
    /// the call, so a retry after a failure or a crash sends the same identifier and Apple applies it once; the
    /// outcome as Apple answered. Mass extensions (all active subscribers of a product) have no subscription.
    static let extensions = Migration(version: 19, name: "renewal-date extensions", sql: [
        """
        CREATE TABLE renewal_extensions (
            request_identifier text PRIMARY KEY,
            bundle_id text NOT NULL,
            environment text NOT NULL,
            original_transaction_id text,
            product_id text,
            storefronts text[] NOT NULL DEFAULT '{}',
            extend_by_days integer NOT NULL,
            reason_code integer NOT NULL,
            requested_at timestamptz NOT NULL DEFAULT now(),
            outcome text NOT NULL DEFAULT 'requested' CHECK (outcome IN ('requested', 'succeeded', 'failed')),
            effective_date timestamptz,
            apple_error text,
            complete boolean,
            complete_date timestamptz,
            succeeded_count bigint,
            failed_count bigint,
            summary_notification_uuid text,
            CHECK ((original_transaction_id IS NULL) <> (product_id IS NULL))
        )
        """,
        "CREATE INDEX renewal_extensions_by_subscription ON renewal_extensions (original_transaction_id, requested_at) WHERE original_transaction_id IS NOT NULL",
    ])
}
