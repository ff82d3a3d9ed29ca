extension Migrations {
    /// Which records a worker published as dead letters, written before its batch commits (`withDeadLetterClaim`):
    /// the partition's next owner after a rebalance, reading the same batch while the first is still writing it,
    /// sees the claim and does not publish a second dead letter. Positions only, no identifier of the payload (so
    /// erasure has nothing to find here); pruned with the dead letters.
    static let deadLetterClaims = Migration(version: 25, name: "dead-letter claims: one dead letter per record across owners", sql: [
        """
        CREATE TABLE dead_letter_claims (
            original_topic text NOT NULL,
            original_partition integer NOT NULL,
            original_offset bigint NOT NULL,
            dead_letter_topic text NOT NULL,
            dead_letter_partition integer NOT NULL,
            dead_letter_offset bigint NOT NULL,
            claimed_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (original_topic, original_partition, original_offset)
        )
        """,
        "CREATE INDEX dead_letter_claims_by_time ON dead_letter_claims (claimed_at)",
    ])
}
