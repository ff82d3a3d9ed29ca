extension Migrations {
    /// Every primary and unique key of a table that grows with the subscriptions now holds the table's routing key
    /// (the Kafka key, `RoutingKey`: the original transaction id; the CloudEvents subject for the event tables), so
    /// the schema can be distributed by it (Citus: a distributed table's unique keys must contain its distribution
    /// column; docs/scale.md lists each table's column and the tables that stay local or become reference tables).
    /// The routing column is put last in each key, so the lookups the code makes by the old key (a transaction id, a
    /// row id, an event id) still use the key's index as its prefix: no index is added for them.
    ///
    /// Each key is rebuilt under the table's ACCESS EXCLUSIVE lock, in the migration's transaction (the time it
    /// takes on a book of a million transactions is in docs/scale.md).
    static let routingKeys = Migration(version: 22, name: "routing keys in every unique key of the subscription tables", sql: [
        // A transaction always belongs to the subscription it was first stored under (Apple never moves a
        // transaction id to another original transaction id).
        "ALTER TABLE transactions DROP CONSTRAINT transactions_pkey, ADD PRIMARY KEY (transaction_id, original_transaction_id)",
        // Grace rows named only the transaction: they take its subscription (a grace row without its transaction
        // cannot be written, as both are written in one transaction and erased together; should one exist, it
        // keeps the transaction id as its routing key).
        "ALTER TABLE transaction_grace ADD COLUMN original_transaction_id text",
        """
        UPDATE transaction_grace g SET original_transaction_id = coalesce(
            (SELECT t.original_transaction_id FROM transactions t WHERE t.transaction_id = g.transaction_id LIMIT 1), g.transaction_id)
        """,
        """
        ALTER TABLE transaction_grace ALTER COLUMN original_transaction_id SET NOT NULL,
            DROP CONSTRAINT transaction_grace_pkey, ADD PRIMARY KEY (transaction_id, original_transaction_id)
        """,
        // A consumption request's routing key is its notification's (the original transaction id; the worker's rule
        // for a notification without one).
        "ALTER TABLE consumption_requests ADD COLUMN routing_key text",
        "UPDATE consumption_requests SET routing_key = coalesce(original_transaction_id, notification_uuid)",
        """
        ALTER TABLE consumption_requests ALTER COLUMN routing_key SET NOT NULL,
            DROP CONSTRAINT consumption_requests_pkey, ADD PRIMARY KEY (notification_uuid, routing_key)
        """,
        // The outbox and the webhook deliveries are keyed by the event's subject: the events topic's Kafka key, the
        // original transaction id for every event of a subscription (docs/events.md).
        """
        ALTER TABLE entitlement_events_outbox DROP CONSTRAINT entitlement_events_outbox_pkey,
            DROP CONSTRAINT entitlement_events_outbox_event_id_key,
            ADD PRIMARY KEY (id, subject), ADD CONSTRAINT entitlement_events_outbox_event_id_key UNIQUE (event_id, subject)
        """,
        "ALTER TABLE webhook_attempts ADD COLUMN subject text",
        "UPDATE webhook_attempts a SET subject = d.subject FROM webhook_deliveries d WHERE d.id = a.delivery_id",
        """
        ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_delivery_id_fkey, ALTER COLUMN subject SET NOT NULL,
            DROP CONSTRAINT webhook_attempts_pkey, ADD PRIMARY KEY (id, subject)
        """,
        """
        ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_pkey,
            DROP CONSTRAINT webhook_deliveries_endpoint_id_event_id_key,
            ADD PRIMARY KEY (id, subject), ADD CONSTRAINT webhook_deliveries_endpoint_id_event_id_key UNIQUE (endpoint_id, event_id, subject)
        """,
        """
        ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_delivery_id_fkey FOREIGN KEY (delivery_id, subject)
            REFERENCES webhook_deliveries (id, subject) ON DELETE CASCADE
        """,
        "ALTER TABLE customer_purchases DROP CONSTRAINT customer_purchases_pkey, ADD PRIMARY KEY (purchase_key, original_transaction_id)",
        "ALTER TABLE customer_transfers DROP CONSTRAINT customer_transfers_pkey, ADD PRIMARY KEY (id, original_transaction_id)",
    ])
}
