extension Migrations {
    /// The offer-signature ledger (docs/offers.md): every signature the customer API issued, with its nonce, for
    /// whom and for what; and the customer API's `offers` scope (a key of its own, like `erase`).
    static let offers = Migration(version: 24, name: "offer signature ledger; offers scope", sql: [
        """
        CREATE TABLE offer_signatures (
            nonce text NOT NULL,
            environment text NOT NULL,
            bundle_id text NOT NULL,
            customer_id text NOT NULL,
            product_id text NOT NULL,
            kind text NOT NULL CHECK (kind IN ('promotional-offer', 'introductory-offer-eligibility')),
            offer_identifier text,
            transaction_id text,
            issued_at timestamptz NOT NULL,
            rule text NOT NULL,
            redeemed_transaction_id text,
            redeemed_at timestamptz,
            PRIMARY KEY (nonce, customer_id)
        )
        """,
        "CREATE INDEX offer_signatures_by_customer ON offer_signatures (bundle_id, customer_id, issued_at)",
        // The worker links a redeeming purchase to its signature by offer and product (unredeemed ones only).
        "CREATE INDEX offer_signatures_unredeemed ON offer_signatures (bundle_id, offer_identifier, product_id) WHERE redeemed_transaction_id IS NULL",
        "CREATE UNIQUE INDEX offer_signatures_redeemed_by ON offer_signatures (redeemed_transaction_id, customer_id) WHERE redeemed_transaction_id IS NOT NULL",
        "ALTER TABLE api_keys DROP CONSTRAINT api_keys_scope_check",
        "ALTER TABLE api_keys ADD CONSTRAINT api_keys_scope_check CHECK (scope IN ('read', 'write', 'erase', 'offers'))",
    ])
}
