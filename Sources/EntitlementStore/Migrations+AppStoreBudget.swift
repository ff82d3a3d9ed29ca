extension Migrations {
    /// The App Store Server API budget every process shares (module AppStoreBudget, docs/appstore-budget.md): per
    /// (app, environment, endpoint class) the schedule's next free slot and Apple's last pause; per lane and process,
    /// how many calls wait and since when (reported at most once a second; rows older than a few seconds are stale).
    static let appStoreBudget = Migration(version: 23, name: "App Store Server API budget shared by every process", sql: [
        """
        CREATE TABLE appstore_api_budget (
            bundle_id text NOT NULL,
            environment text NOT NULL,
            endpoint_class text NOT NULL,
            rate double precision NOT NULL,
            next_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            paused_until timestamptz,
            pause_reason text,
            pauses bigint NOT NULL DEFAULT 0,
            granted bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (bundle_id, environment, endpoint_class)
        )
        """,
        """
        CREATE TABLE appstore_api_budget_queues (
            bundle_id text NOT NULL,
            environment text NOT NULL,
            endpoint_class text NOT NULL,
            lane text NOT NULL,
            holder text NOT NULL,
            waiting integer NOT NULL,
            oldest_wait_seconds double precision NOT NULL,
            reported_at timestamptz NOT NULL,
            PRIMARY KEY (bundle_id, environment, endpoint_class, lane, holder)
        )
        """,
    ])
}
