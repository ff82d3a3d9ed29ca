/// How each table of the schema is laid out on a distributed PostgreSQL (Citus), by the routing key: the Kafka key of
/// the notifications topic (`RoutingKey`: the original transaction id, or what a notification without one is keyed
/// by), so that everything one subscription's notification touches lives on one shard (docs/scale.md, "Ready for a
/// distributed PostgreSQL"). Every table is in exactly one of the three lists; a test reads the catalog and fails on
/// a table missing here, or on a distributed table with a primary or unique key that lacks its routing column.
public enum DistributionLayout {
    /// Tables that grow with the subscriptions, each with the column that holds its routing key
    /// (`create_distributed_table(table, column, colocate_with => 'entitlements')`).
    public static let distributed: [String: String] = [
        "entitlements": "original_transaction_id",
        "transactions": "original_transaction_id",
        "transaction_grace": "original_transaction_id",
        // The id an import or reconcile names (an import list names subscriptions by their original transaction id).
        "transaction_history_revisions": "transaction_id",
        "consumption_requests": "routing_key",
        "customer_ownership": "original_transaction_id",
        "customer_purchases": "original_transaction_id",
        "customer_transfers": "original_transaction_id",
        // The CloudEvents subject: the events topic's Kafka key, the original transaction id for a subscription's events.
        "entitlement_events_outbox": "subject",
        "webhook_deliveries": "subject",
        "webhook_attempts": "subject",
        "notification_ledger": "routing_key",
        "notification_archive": "routing_key",
        "notification_deliveries": "routing_key",
        // A customer's offer signatures: read and written by the customer API per customer.
        "offer_signatures": "customer_id",
        // The metrics' computed periods and the subscriptions changed since (migration 27): one subscription's rows.
        "metric_periods": "original_transaction_id",
        "metric_dirty_subscriptions": "original_transaction_id",
        // Refund-request changes the archive's triggers append, with the archived notification's routing key.
        "metric_refund_request_changes": "routing_key",
    ]

    /// Small tables that distributed rows are checked against or joined with, copied to every node
    /// (`create_reference_table`): the catalogue, rates, certificate chains, settings, keys, endpoints and the
    /// erasure suppression lists (written rarely, read by the workers' transactions on every shard).
    public static let reference: Set<String> = [
        "product_catalog", "exchange_rates", "jws_headers", "entitlement_settings", "api_keys", "webhook_endpoints",
        "erasure_suppressions", "erasure_keys", "erased_events", "notification_ledger_undated",
    ]

    /// Tables of the operators and of jobs, kept on the coordinator: never joined with a subscription's rows in a
    /// worker's transaction, read and written by one command or the console at a time.
    public static let local: Set<String> = [
        "schema_migrations", "dead_lettered_records", "dead_letter_claims", "dead_letter_redrives", "backfill_runs", "pull_runs", "operators",
        "operator_sessions", "console_audit", "erasure_requests", "renewal_extensions", "appstore_api_budget",
        "appstore_api_budget_queues",
        // The metrics' daily rollups (migration 27): sums over every subscription, written by the one aggregator
        // and read by the metric functions, both on the coordinator.
        "metric_rollup_state", "metric_rollup_active", "metric_rollup_mrr", "metric_rollup_starts", "metric_rollup_refunds",
        "metric_rollup_retention", "metric_rollup_mrr_movement", "metric_rollup_churn_corners", "metric_rollup_churn_edges",
        "metric_rollup_product_durations", "metric_rollup_refund_requests",
    ]
}
