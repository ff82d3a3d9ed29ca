extension Migrations {
    /// The advisory lock that serializes the rollups' writers (`metric_rollups_apply`, `metric_rollups_rebuild`): "mrol".
    public static let metricRollupsLockKey: Int64 = 0x6D72_6F6C

    /// `(x AT TIME ZONE 'UTC')::date`: the UTC day of an instant.
    static func utcDay(_ expression: String) -> String { "(\(expression) AT TIME ZONE 'UTC')::date" }

    /// The periods of the subscriptions `ids` (an SQL array expression; every subscription when nil) in
    /// `metric_periods`' columns, as the two views give them: the filter on the original transaction id is pushed
    /// into the views (it is their windows' partition column), so a batch reads only its subscriptions' rows.
    static func metricPeriodsSelect(ids: String?) -> String {
        let onPaid = ids.map { " AND pp.original_transaction_id = ANY(\($0))" } ?? ""
        let filter = ids.map { "WHERE p.original_transaction_id = ANY(\($0))" } ?? ""
        return """
            SELECT p.original_transaction_id, p.environment, p.bundle_id, p.transaction_id, p.product_id, p.purchase_date, p.effective_end_time,
                p.is_paid, p.is_trial, p.is_family_shared, p.is_refunded, p.currency, p.monthly_price,
                p.price / 1000.0 * coalesce(p.revocation_percentage, 100000) / 100000.0,
                pp.transaction_id IS NOT NULL, pp.is_first_paid, pp.is_resubscription, pp.churned_at,
                lead(p.is_paid) OVER w, lead(p.is_refunded) OVER w,
                CASE WHEN p.product_id IS NOT NULL AND p.expires_date > p.purchase_date AND p.offer_type IS NULL
                    AND p.billing_plan_type IS DISTINCT FROM 'MONTHLY' AND NOT p.is_upgraded
                    THEN apple_subscription_duration(p.expires_date - p.purchase_date) END,
                p.duration
            FROM subscription_periods p
            LEFT JOIN subscription_paid_periods pp ON pp.environment = p.environment AND pp.bundle_id = p.bundle_id
                AND pp.original_transaction_id = p.original_transaction_id AND pp.transaction_id = p.transaction_id\(onPaid)
            \(filter)
            WINDOW w AS (PARTITION BY p.environment, p.bundle_id, p.original_transaction_id ORDER BY p.purchase_date, p.transaction_id)
            """
    }

    /// CTE `rates`: for each distinct (`currency`, `day`) of CTE `source` (currency '' for none), the rate into
    /// `p_currency` by `metric_exchange_rate`'s rule (1 for the reporting currency itself, else the newest rate dated
    /// on or before the day, else the oldest after it; null when there is none), as two index probes instead of one
    /// call per pair (a call through the SQL-function executor cost 0.2 ms: 0.45 s for a year of MRR at ten million).
    static func rollupRates(from source: String, day: String) -> String {
        """
        rates AS MATERIALIZED (
                        SELECT d.currency, d.day, CASE WHEN d.currency = p_currency THEN 1::numeric ELSE coalesce(
                            (SELECT r.rate FROM exchange_rates r WHERE r.currency = d.currency AND r.reporting_currency = p_currency AND r.rate_date <= d.day
                                ORDER BY r.rate_date DESC LIMIT 1),
                            (SELECT r.rate FROM exchange_rates r WHERE r.currency = d.currency AND r.reporting_currency = p_currency
                                ORDER BY r.rate_date ASC LIMIT 1)) END AS rate
                        FROM (SELECT DISTINCT currency, \(day) AS day FROM \(source)) d
                    )
        """
    }

    /// The rollup tables' storage: every apply rewrites the same few thousand rows, so half of each page is left free
    /// for the new versions (an update on the same page touches no index), and autovacuum and analyze come after
    /// 10 000 changed rows, not after a fifth of the table (measured on a book of a million applied incrementally:
    /// 45 MB of dead versions behind 9 133 rows of MRR, and reads twice as slow as after a rebuild).
    static let rollupStorage = "WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000)"

    /// Migration 27: the metrics from daily rollups (docs/scale.md, "Metrics from rollups").
    ///
    /// Every metric but `refund-requests` (counts of archived notifications, kept by the archive's own triggers) is a
    /// sum over subscriptions of something that depends only on that
    /// subscription's periods (`subscription_periods`, `subscription_paid_periods`). So each subscription's periods
    /// are kept computed (`metric_periods`: the two views' rows, read through the views themselves so the definitions
    /// stay in one place), and their contributions are added to small rollup tables keyed by day; when a
    /// subscription changes (a statement trigger on `transactions` and `transaction_grace` marks it in
    /// `metric_dirty_subscriptions`), `metric_rollups_apply` subtracts its old rows' contributions and adds the new
    /// ones. A replay or a duplicate gives the same rows and so changes nothing; any delivery order ends in the same
    /// rows. Exchange rates stay a query-time input: money is kept by currency and purchase day.
    ///
    /// The `metric_rollup_*` functions answer the metrics from the rollups for ranges whose ends are UTC midnights,
    /// without a product or storefront filter; the others keep migration 14's full computation, and `pipelinectl
    /// metrics compare` holds the two against each other.
    static let metricRollups = Migration(version: 27, name: "subscription metrics from daily rollups", sql: [
        // MARK: State, the dirty set, the periods
        // Built on an empty database at once; a deployment with a book builds with `pipelinectl metrics rollups
        // rebuild` (minutes at ten million), and the metrics keep the full computation until then.
        """
        CREATE TABLE metric_rollup_state (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            built boolean NOT NULL,
            built_at timestamptz
        )
        """,
        "INSERT INTO metric_rollup_state (built, built_at) SELECT NOT EXISTS (SELECT 1 FROM transactions), now()",
        """
        CREATE TABLE metric_dirty_subscriptions (
            original_transaction_id text PRIMARY KEY,
            marked_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )
        """,
        """
        CREATE TABLE metric_periods (
            original_transaction_id text NOT NULL,
            environment text NOT NULL,
            bundle_id text NOT NULL,
            transaction_id text NOT NULL,
            product_id text,
            purchase_date timestamptz NOT NULL,
            effective_end_time timestamptz NOT NULL,
            is_paid boolean,
            is_trial boolean,
            is_family_shared boolean NOT NULL,
            is_refunded boolean NOT NULL,
            currency text,
            monthly_price numeric,
            refund_amount numeric,
            in_paid boolean NOT NULL,
            is_first_paid boolean,
            is_resubscription boolean,
            churned_at timestamptz,
            next_is_paid boolean,
            next_is_refunded boolean,
            observed_duration text,
            duration text,
            PRIMARY KEY (original_transaction_id, environment, bundle_id, transaction_id)
        )
        """,
        // The trials that may still be running: `trial-conversion` decides pending or abandoned against now().
        """
        CREATE INDEX metric_periods_undecided_trials ON metric_periods (environment, effective_end_time)
        WHERE is_trial AND NOT is_family_shared AND next_is_paid IS NOT TRUE
        """,
        "CREATE INDEX metric_periods_by_product ON metric_periods (product_id)",

        // MARK: Rollup tables (sums of the subscriptions' contributions; a row may sum to zero)
        // Coverage of UTC midnights: +1 on the first midnight a period covers, −1 after its last.
        """
        CREATE TABLE metric_rollup_active (
            environment text NOT NULL, bundle_id text NOT NULL, day date NOT NULL, kind text NOT NULL, delta bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, day, kind)
        ) \(rollupStorage)
        """,
        // Paid coverage's money: by currency ('' for none) and purchase day, the day the rate is taken on.
        """
        CREATE TABLE metric_rollup_mrr (
            environment text NOT NULL, bundle_id text NOT NULL, day date NOT NULL, currency text NOT NULL, purchase_day date NOT NULL,
            amount numeric NOT NULL, periods bigint NOT NULL, unpriced bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, day, currency, purchase_day)
        ) \(rollupStorage)
        """,
        // Counts by day: trial, paid and family-shared starts, resubscriptions, trials by outcome.
        """
        CREATE TABLE metric_rollup_starts (
            environment text NOT NULL, bundle_id text NOT NULL, day date NOT NULL, kind text NOT NULL, count bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, day, kind)
        ) \(rollupStorage)
        """,
        """
        CREATE TABLE metric_rollup_refunds (
            environment text NOT NULL, bundle_id text NOT NULL, day date NOT NULL, currency text NOT NULL,
            paid bigint NOT NULL, refunded bigint NOT NULL, refunded_amount numeric NOT NULL, refunded_unpriced bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, day, currency)
        ) \(rollupStorage)
        """,
        // Cohorts: by the first paid day, how many paid periods (not refunded) each subscription has.
        """
        CREATE TABLE metric_rollup_retention (
            environment text NOT NULL, bundle_id text NOT NULL, day date NOT NULL, periods bigint NOT NULL, subscriptions bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, day, periods)
        ) \(rollupStorage)
        """,
        // Paid periods that start a subscription ('new'), resume one ('resubscription') or churn ('infinity': never).
        """
        CREATE TABLE metric_rollup_mrr_movement (
            environment text NOT NULL, bundle_id text NOT NULL, purchase_day date NOT NULL, churn_day date NOT NULL, currency text NOT NULL,
            started text NOT NULL, amount numeric NOT NULL, periods bigint NOT NULL, unpriced bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, purchase_day, churn_day, currency, started)
        ) \(rollupStorage)
        """,
        "CREATE INDEX metric_rollup_mrr_movement_by_churn ON metric_rollup_mrr_movement (environment, churn_day)",
        // Churn: a subscription counts in a bucket [s, e) (midnights) when it is paid-active at s, not at e, and one of
        // its paid periods churned in between. For one subscription the pairs (s, e) that count are a few disjoint
        // rectangles; each is kept as its four corners' weights (+1, −1, −1, +1), so that the count at (s, e) is the
        // sum of the weights of the corners at or below it (cs ≤ s, ce ≤ e). Corners with ce ≤ s are summed by ce
        // alone (every corner has cs ≤ ce), the others read by ce in (s, e].
        """
        CREATE TABLE metric_rollup_churn_corners (
            environment text NOT NULL, bundle_id text NOT NULL, ce date NOT NULL, cs date NOT NULL, weight bigint NOT NULL,
            PRIMARY KEY (environment, ce, bundle_id, cs)
        ) \(rollupStorage)
        """,
        """
        CREATE TABLE metric_rollup_churn_edges (
            environment text NOT NULL, bundle_id text NOT NULL, ce date NOT NULL, weight bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, ce)
        ) \(rollupStorage)
        """,
        // Refund requests by outcome: counts by signed day of the archived notifications `metric_refund_requests`
        // counts. The archive's triggers append a change per notification (no row is shared between workers, so
        // none waits for another); the aggregator folds them into the counts, and a read adds those not folded yet.
        """
        CREATE TABLE metric_rollup_refund_requests (
            environment text NOT NULL, bundle_id text NOT NULL, day date NOT NULL, notification_type text NOT NULL, count bigint NOT NULL,
            PRIMARY KEY (environment, bundle_id, day, notification_type)
        ) \(rollupStorage)
        """,
        """
        CREATE TABLE metric_refund_request_changes (
            id bigserial NOT NULL,
            routing_key text NOT NULL,
            environment text NOT NULL, bundle_id text NOT NULL, day date NOT NULL, notification_type text NOT NULL, delta integer NOT NULL,
            PRIMARY KEY (id, routing_key)
        )
        """,
        // What `refresh_product_catalog()` observes, kept with the periods (so the money metrics need no scan).
        """
        CREATE TABLE metric_rollup_product_durations (
            product_id text NOT NULL, duration text NOT NULL, periods bigint NOT NULL,
            PRIMARY KEY (product_id, duration)
        ) \(rollupStorage)
        """,

        // MARK: Marking changed subscriptions
        // ON CONFLICT DO UPDATE, not DO NOTHING: the worker's change locks the subscription's row until it commits,
        // so the aggregator (FOR UPDATE SKIP LOCKED) cannot claim it and read the rows before the change is visible.
        """
        CREATE FUNCTION metric_mark_changed_transactions() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO metric_dirty_subscriptions AS d (original_transaction_id)
            SELECT DISTINCT original_transaction_id FROM changed WHERE type = 'Auto-Renewable Subscription' ORDER BY 1
            ON CONFLICT (original_transaction_id) DO UPDATE SET marked_at = EXCLUDED.marked_at;
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE FUNCTION metric_mark_changed_graces() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO metric_dirty_subscriptions AS d (original_transaction_id)
            SELECT DISTINCT original_transaction_id FROM changed ORDER BY 1
            ON CONFLICT (original_transaction_id) DO UPDATE SET marked_at = EXCLUDED.marked_at;
            RETURN NULL;
        END
        $$
        """,
        "CREATE TRIGGER metric_marks_inserted AFTER INSERT ON transactions REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION metric_mark_changed_transactions()",
        "CREATE TRIGGER metric_marks_updated AFTER UPDATE ON transactions REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION metric_mark_changed_transactions()",
        "CREATE TRIGGER metric_marks_deleted AFTER DELETE ON transactions REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION metric_mark_changed_transactions()",
        "CREATE TRIGGER metric_marks_inserted AFTER INSERT ON transaction_grace REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION metric_mark_changed_graces()",
        "CREATE TRIGGER metric_marks_updated AFTER UPDATE ON transaction_grace REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION metric_mark_changed_graces()",
        "CREATE TRIGGER metric_marks_deleted AFTER DELETE ON transaction_grace REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION metric_mark_changed_graces()",
        // The archived notifications `metric_refund_requests` counts (its four types, with a transaction that is not
        // family-shared), as changes of +1 (stored) or −1 (erased, pruned).
        """
        CREATE FUNCTION metric_note_refund_requests() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                INSERT INTO metric_refund_request_changes (routing_key, environment, bundle_id, day, notification_type, delta)
                SELECT n.routing_key, n.environment, n.bundle_id, \(utcDay("n.signed_date")), n.notification_type, 1 FROM new_rows n
                WHERE n.notification_type IN ('CONSUMPTION_REQUEST', 'REFUND', 'REFUND_DECLINED', 'REFUND_REVERSED')
                    AND archived_transaction_info(n) IS NOT NULL AND coalesce(archived_transaction_info(n)->>'inAppOwnershipType', '') <> 'FAMILY_SHARED';
            END IF;
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                INSERT INTO metric_refund_request_changes (routing_key, environment, bundle_id, day, notification_type, delta)
                SELECT n.routing_key, n.environment, n.bundle_id, \(utcDay("n.signed_date")), n.notification_type, -1 FROM old_rows n
                WHERE n.notification_type IN ('CONSUMPTION_REQUEST', 'REFUND', 'REFUND_DECLINED', 'REFUND_REVERSED')
                    AND archived_transaction_info(n) IS NOT NULL AND coalesce(archived_transaction_info(n)->>'inAppOwnershipType', '') <> 'FAMILY_SHARED';
            END IF;
            RETURN NULL;
        END
        $$
        """,
        "CREATE TRIGGER metric_notes_inserted AFTER INSERT ON notification_archive REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION metric_note_refund_requests()",
        "CREATE TRIGGER metric_notes_updated AFTER UPDATE ON notification_archive REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION metric_note_refund_requests()",
        "CREATE TRIGGER metric_notes_deleted AFTER DELETE ON notification_archive REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION metric_note_refund_requests()",
        // A dropped month of the archive (retention) leaves the counts as the full computation sees them: none.
        """
        CREATE FUNCTION metric_rollups_forget_archive(p_from timestamptz, p_to timestamptz) RETURNS void VOLATILE LANGUAGE sql AS $$
            DELETE FROM metric_rollup_refund_requests WHERE day >= \(utcDay("p_from")) AND day < \(utcDay("p_to"));
            DELETE FROM metric_refund_request_changes WHERE day >= \(utcDay("p_from")) AND day < \(utcDay("p_to"));
        $$
        """,
        // A product's duration changes its periods' monthly value; the expiry leeway changes resubscriptions and churn.
        // A period already computed with the new duration keeps its value: only the others' subscriptions are marked
        // (the catalog's first fill, from the durations the periods were read with, then marks few).
        """
        CREATE FUNCTION metric_mark_product() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                INSERT INTO metric_dirty_subscriptions AS d (original_transaction_id)
                SELECT DISTINCT original_transaction_id FROM metric_periods WHERE product_id = OLD.product_id ORDER BY 1
                ON CONFLICT (original_transaction_id) DO UPDATE SET marked_at = EXCLUDED.marked_at;
            ELSE
                INSERT INTO metric_dirty_subscriptions AS d (original_transaction_id)
                SELECT DISTINCT original_transaction_id FROM metric_periods
                WHERE product_id = NEW.product_id AND duration IS DISTINCT FROM NEW.duration ORDER BY 1
                ON CONFLICT (original_transaction_id) DO UPDATE SET marked_at = EXCLUDED.marked_at;
            END IF;
            RETURN NULL;
        END
        $$
        """,
        "CREATE TRIGGER metric_marks_product_added AFTER INSERT OR DELETE ON product_catalog FOR EACH ROW EXECUTE FUNCTION metric_mark_product()",
        """
        CREATE TRIGGER metric_marks_product_changed AFTER UPDATE ON product_catalog FOR EACH ROW
        WHEN (OLD.duration IS DISTINCT FROM NEW.duration) EXECUTE FUNCTION metric_mark_product()
        """,
        """
        CREATE FUNCTION metric_mark_all() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO metric_dirty_subscriptions AS d (original_transaction_id)
            SELECT DISTINCT original_transaction_id FROM metric_periods ORDER BY 1
            ON CONFLICT (original_transaction_id) DO UPDATE SET marked_at = EXCLUDED.marked_at;
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER metric_marks_leeway AFTER UPDATE ON entitlement_settings FOR EACH ROW
        WHEN (OLD.expiry_leeway IS DISTINCT FROM NEW.expiry_leeway) EXECUTE FUNCTION metric_mark_all()
        """,

        // MARK: Computing and applying
        // Adds the contributions of the rows of `p_source` (metric_periods' columns and `sign`, +1 or −1) to every
        // rollup. Sums are grouped and sorted by key, so concurrent writers would lock rows in one order.
        """
        CREATE FUNCTION metric_rollups_add(p_source text) RETURNS void VOLATILE LANGUAGE plpgsql AS $f$
        BEGIN
            EXECUTE format($q$
                WITH s AS (SELECT *, \(utcDay("purchase_date")) AS pday, \(utcDay("effective_end_time")) AS eday FROM %s x),
                k AS (SELECT s.*, CASE WHEN is_paid THEN 'paid' WHEN is_trial AND NOT is_family_shared THEN 'trial' WHEN is_family_shared THEN 'family' END AS kind
                      FROM s WHERE pday + 1 <= eday)
                INSERT INTO metric_rollup_active AS r (environment, bundle_id, day, kind, delta)
                SELECT environment, bundle_id, day, kind, sum(delta) FROM (
                    SELECT environment, bundle_id, pday + 1 AS day, kind, sign AS delta FROM k WHERE kind IS NOT NULL
                    UNION ALL
                    SELECT environment, bundle_id, eday + 1, kind, -sign FROM k WHERE kind IS NOT NULL
                ) x GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                ON CONFLICT (environment, bundle_id, day, kind) DO UPDATE SET delta = r.delta + EXCLUDED.delta
            $q$, p_source);
            EXECUTE format($q$
                WITH s AS (SELECT *, \(utcDay("purchase_date")) AS pday, \(utcDay("effective_end_time")) AS eday FROM %s x),
                k AS (SELECT * FROM s WHERE is_paid AND pday + 1 <= eday)
                INSERT INTO metric_rollup_mrr AS r (environment, bundle_id, day, currency, purchase_day, amount, periods, unpriced)
                SELECT environment, bundle_id, day, currency, purchase_day, coalesce(sum(amount), 0), sum(periods), sum(unpriced) FROM (
                    SELECT environment, bundle_id, pday + 1 AS day, coalesce(currency, '') AS currency, pday AS purchase_day,
                        sign * monthly_price AS amount, sign AS periods, CASE WHEN monthly_price IS NULL THEN sign ELSE 0 END AS unpriced FROM k
                    UNION ALL
                    SELECT environment, bundle_id, eday + 1, coalesce(currency, ''), pday,
                        -sign * monthly_price, -sign, CASE WHEN monthly_price IS NULL THEN -sign ELSE 0 END FROM k
                ) x GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
                ON CONFLICT (environment, bundle_id, day, currency, purchase_day) DO UPDATE SET amount = r.amount + EXCLUDED.amount,
                    periods = r.periods + EXCLUDED.periods, unpriced = r.unpriced + EXCLUDED.unpriced
            $q$, p_source);
            EXECUTE format($q$
                WITH s AS (SELECT *, \(utcDay("purchase_date")) AS pday FROM %s x)
                INSERT INTO metric_rollup_starts AS r (environment, bundle_id, day, kind, count)
                SELECT environment, bundle_id, day, kind, sum(count) FROM (
                    SELECT environment, bundle_id, pday AS day, 'trial' AS kind, sign AS count FROM s WHERE is_trial AND NOT is_family_shared
                    UNION ALL
                    SELECT environment, bundle_id, pday, CASE WHEN next_is_paid THEN CASE WHEN NOT next_is_refunded THEN 'trial_converted' ELSE 'trial_refused' END
                        ELSE 'trial_undecided' END, sign FROM s WHERE is_trial AND NOT is_family_shared
                    UNION ALL
                    SELECT environment, bundle_id, pday, 'paid', sign FROM s WHERE in_paid AND is_first_paid
                    UNION ALL
                    SELECT environment, bundle_id, pday, 'resubscription', sign FROM s WHERE in_paid AND is_resubscription
                    UNION ALL
                    SELECT environment, bundle_id, min(pday), 'family', sign FROM s WHERE is_family_shared
                    GROUP BY environment, bundle_id, original_transaction_id, sign
                ) x GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                ON CONFLICT (environment, bundle_id, day, kind) DO UPDATE SET count = r.count + EXCLUDED.count
            $q$, p_source);
            EXECUTE format($q$
                WITH s AS (SELECT *, \(utcDay("purchase_date")) AS pday FROM %s x)
                INSERT INTO metric_rollup_refunds AS r (environment, bundle_id, day, currency, paid, refunded, refunded_amount, refunded_unpriced)
                SELECT environment, bundle_id, pday, coalesce(currency, ''), sum(sign), coalesce(sum(sign) FILTER (WHERE is_refunded), 0),
                    coalesce(sum(sign * refund_amount) FILTER (WHERE is_refunded), 0),
                    count(*) FILTER (WHERE is_refunded AND refund_amount IS NULL AND sign > 0) - count(*) FILTER (WHERE is_refunded AND refund_amount IS NULL AND sign < 0)
                FROM s WHERE is_paid GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                ON CONFLICT (environment, bundle_id, day, currency) DO UPDATE SET paid = r.paid + EXCLUDED.paid,
                    refunded = r.refunded + EXCLUDED.refunded, refunded_amount = r.refunded_amount + EXCLUDED.refunded_amount,
                    refunded_unpriced = r.refunded_unpriced + EXCLUDED.refunded_unpriced
            $q$, p_source);
            EXECUTE format($q$
                WITH s AS (SELECT *, \(utcDay("purchase_date")) AS pday FROM %s x WHERE in_paid),
                subscriptions AS (
                    SELECT environment, bundle_id, min(pday) FILTER (WHERE is_first_paid) AS day, count(*) FILTER (WHERE NOT is_refunded) AS periods, sign
                    FROM s GROUP BY environment, bundle_id, original_transaction_id, sign
                )
                INSERT INTO metric_rollup_retention AS r (environment, bundle_id, day, periods, subscriptions)
                SELECT environment, bundle_id, day, periods, sum(sign) FROM subscriptions WHERE day IS NOT NULL
                GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                ON CONFLICT (environment, bundle_id, day, periods) DO UPDATE SET subscriptions = r.subscriptions + EXCLUDED.subscriptions
            $q$, p_source);
            EXECUTE format($q$
                WITH s AS (
                    SELECT *, \(utcDay("purchase_date")) AS pday, coalesce(\(utcDay("churned_at")), 'infinity'::date) AS cday,
                        CASE WHEN is_first_paid THEN 'new' WHEN is_resubscription THEN 'resubscription' ELSE '' END AS started
                    FROM %s x WHERE in_paid
                )
                INSERT INTO metric_rollup_mrr_movement AS r (environment, bundle_id, purchase_day, churn_day, currency, started, amount, periods, unpriced)
                SELECT environment, bundle_id, pday, cday, coalesce(currency, ''), started, coalesce(sum(sign * monthly_price), 0), sum(sign),
                    count(*) FILTER (WHERE monthly_price IS NULL AND sign > 0) - count(*) FILTER (WHERE monthly_price IS NULL AND sign < 0)
                FROM s WHERE started <> '' OR churned_at IS NOT NULL
                GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6
                ON CONFLICT (environment, bundle_id, purchase_day, churn_day, currency, started) DO UPDATE SET amount = r.amount + EXCLUDED.amount,
                    periods = r.periods + EXCLUDED.periods, unpriced = r.unpriced + EXCLUDED.unpriced
            $q$, p_source);
            -- Churn's rectangles: runs of covered midnights [a, b] (a paid period covers the midnights after its
            -- purchase day up to its end's day), the gaps after each run, and for each run the ranges of s that share
            -- the first churn day d at or after s (s in [max(a, previous d + 1), min(b, d)]: e must be past d).
            EXECUTE format($q$
                WITH s AS (SELECT * FROM %s x WHERE in_paid),
                cov AS (
                    SELECT environment, bundle_id, original_transaction_id AS otid, sign, \(utcDay("purchase_date")) + 1 AS f, \(utcDay("effective_end_time")) AS l
                    FROM s
                ), marked AS (
                    SELECT *, CASE WHEN f <= max(l) OVER (PARTITION BY environment, bundle_id, otid, sign ORDER BY f, l
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) + 1 THEN 0 ELSE 1 END AS starts
                    FROM cov WHERE f <= l
                ), grouped AS (
                    SELECT *, sum(starts) OVER (PARTITION BY environment, bundle_id, otid, sign ORDER BY f, l ROWS UNBOUNDED PRECEDING) AS run FROM marked
                ), runs AS (
                    SELECT environment, bundle_id, otid, sign, run, min(f) AS a, max(l) AS b FROM grouped GROUP BY 1, 2, 3, 4, 5
                ), gaps AS (
                    SELECT environment, bundle_id, otid, sign, run, b + 1 AS g1, lead(a) OVER (PARTITION BY environment, bundle_id, otid, sign ORDER BY run) - 1 AS g2
                    FROM runs
                ), churns AS (
                    SELECT DISTINCT environment, bundle_id, original_transaction_id AS otid, sign, \(utcDay("churned_at")) AS d FROM s WHERE churned_at IS NOT NULL
                ), ch AS (
                    SELECT *, lag(d) OVER (PARTITION BY environment, bundle_id, otid, sign ORDER BY d) AS previous FROM churns
                ), segments AS (
                    SELECT r.environment, r.bundle_id, r.otid, r.sign, r.run, GREATEST(r.a, c.previous + 1) AS s1, LEAST(r.b, c.d) AS s2, c.d + 1 AS c
                    FROM runs r JOIN ch c USING (environment, bundle_id, otid, sign)
                ), rectangles AS (
                    SELECT g.environment, g.bundle_id, g.sign, t.s1, t.s2, GREATEST(g.g1, t.c) AS e1, g.g2 AS e2
                    FROM segments t JOIN gaps g USING (environment, bundle_id, otid, sign)
                    WHERE t.s1 <= t.s2 AND g.run >= t.run AND (g.g2 IS NULL OR GREATEST(g.g1, t.c) <= g.g2)
                ), corners AS (
                    SELECT environment, bundle_id, s1 AS cs, e1 AS ce, sign AS weight FROM rectangles
                    UNION ALL SELECT environment, bundle_id, s2 + 1, e1, -sign FROM rectangles
                    UNION ALL SELECT environment, bundle_id, s1, e2 + 1, -sign FROM rectangles WHERE e2 IS NOT NULL
                    UNION ALL SELECT environment, bundle_id, s2 + 1, e2 + 1, sign FROM rectangles WHERE e2 IS NOT NULL
                ), summed AS (
                    SELECT environment, bundle_id, ce, cs, sum(weight) AS weight FROM corners GROUP BY 1, 2, 3, 4
                ), by_corner AS (
                    INSERT INTO metric_rollup_churn_corners AS r (environment, bundle_id, ce, cs, weight)
                    SELECT environment, bundle_id, ce, cs, weight FROM summed ORDER BY 1, 3, 2, 4
                    ON CONFLICT (environment, ce, bundle_id, cs) DO UPDATE SET weight = r.weight + EXCLUDED.weight
                )
                INSERT INTO metric_rollup_churn_edges AS r (environment, bundle_id, ce, weight)
                SELECT environment, bundle_id, ce, sum(weight) FROM summed GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
                ON CONFLICT (environment, bundle_id, ce) DO UPDATE SET weight = r.weight + EXCLUDED.weight
            $q$, p_source);
            EXECUTE format($q$
                INSERT INTO metric_rollup_product_durations AS r (product_id, duration, periods)
                SELECT product_id, observed_duration, sum(sign) FROM %s x WHERE observed_duration IS NOT NULL
                GROUP BY 1, 2 ORDER BY 1, 2
                ON CONFLICT (product_id, duration) DO UPDATE SET periods = r.periods + EXCLUDED.periods
            $q$, p_source);
        END
        $f$
        """,
        // Folds up to `p_limit` refund-request changes into the counts (those an open transaction is writing are
        // skipped: they are invisible until it commits); returns how many.
        """
        CREATE FUNCTION metric_rollups_fold_changes(p_limit integer) RETURNS integer VOLATILE LANGUAGE plpgsql AS $f$
        DECLARE
            folded_count integer;
        BEGIN
            WITH folded AS (
                DELETE FROM metric_refund_request_changes WHERE (id, routing_key) IN (
                    SELECT id, routing_key FROM metric_refund_request_changes ORDER BY id LIMIT p_limit FOR UPDATE SKIP LOCKED)
                RETURNING environment, bundle_id, day, notification_type, delta
            ), summed AS (
                INSERT INTO metric_rollup_refund_requests AS r (environment, bundle_id, day, notification_type, count)
                SELECT environment, bundle_id, day, notification_type, sum(delta) FROM folded GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                ON CONFLICT (environment, bundle_id, day, notification_type) DO UPDATE SET count = r.count + EXCLUDED.count
                RETURNING 1
            )
            SELECT count(*) INTO folded_count FROM folded;
            RETURN folded_count;
        END
        $f$
        """,
        // Recomputes the periods of the subscriptions `ids` and applies the difference to the rollups.
        """
        CREATE FUNCTION metric_rollups_recompute(ids text[]) RETURNS void VOLATILE LANGUAGE plpgsql AS $f$
        BEGIN
            CREATE TEMP TABLE IF NOT EXISTS metric_batch (LIKE metric_periods, sign integer NOT NULL) ON COMMIT DELETE ROWS;
            TRUNCATE metric_batch;
            INSERT INTO metric_batch SELECT m.*, -1 FROM metric_periods m WHERE m.original_transaction_id = ANY(ids);
            DELETE FROM metric_periods WHERE original_transaction_id = ANY(ids);
            INSERT INTO metric_periods \(metricPeriodsSelect(ids: "ids"));
            INSERT INTO metric_batch SELECT m.*, 1 FROM metric_periods m WHERE m.original_transaction_id = ANY(ids);
            PERFORM metric_rollups_add('metric_batch');
        END
        $f$
        """,
        // Claims up to `p_batch` changed subscriptions (skipping those a worker's open transaction is marking),
        // recomputes them and folds refund-request changes; returns how many of both. One writer at a time (an
        // advisory lock for the transaction). Nothing is claimed before the rollups are built.
        """
        CREATE FUNCTION metric_rollups_apply(p_batch integer) RETURNS integer VOLATILE LANGUAGE plpgsql AS $f$
        DECLARE
            ids text[];
            changes integer;
        BEGIN
            IF NOT coalesce((SELECT built FROM metric_rollup_state), false)
                OR NOT (EXISTS (SELECT 1 FROM metric_dirty_subscriptions) OR EXISTS (SELECT 1 FROM metric_refund_request_changes)) THEN
                RETURN 0;
            END IF;
            PERFORM pg_advisory_xact_lock(\(metricRollupsLockKey));
            changes := metric_rollups_fold_changes(50 * p_batch);
            SELECT array_agg(original_transaction_id) INTO ids FROM (
                SELECT original_transaction_id FROM metric_dirty_subscriptions ORDER BY original_transaction_id LIMIT p_batch FOR UPDATE SKIP LOCKED
            ) d;
            IF ids IS NULL THEN
                RETURN changes;
            END IF;
            DELETE FROM metric_dirty_subscriptions WHERE original_transaction_id = ANY(ids);
            PERFORM metric_rollups_recompute(ids);
            RETURN changes + cardinality(ids);
        END
        $f$
        """,
        // An erasure's last step, in its transaction: the erased subscriptions leave the rollups (their contribution
        // subtracted), the computed periods and the changed set, and the refund-request changes naming them are
        // folded into counts that name no one.
        """
        CREATE FUNCTION metric_rollups_forget(ids text[]) RETURNS void VOLATILE LANGUAGE plpgsql AS $f$
        BEGIN
            PERFORM pg_advisory_xact_lock(\(metricRollupsLockKey));
            PERFORM metric_rollups_fold_changes(2147483647);
            DELETE FROM metric_dirty_subscriptions WHERE original_transaction_id = ANY(ids);
            IF coalesce((SELECT built FROM metric_rollup_state), false) THEN
                PERFORM metric_rollups_recompute(ids);
            ELSE
                DELETE FROM metric_periods WHERE original_transaction_id = ANY(ids);
            END IF;
        END
        $f$
        """,
        // Builds everything from the views in one pass (the changed set is emptied by the caller before, in a
        // transaction of its own, so that what workers mark while this runs is applied after).
        """
        CREATE FUNCTION metric_rollups_rebuild() RETURNS bigint VOLATILE LANGUAGE plpgsql AS $f$
        BEGIN
            PERFORM pg_advisory_xact_lock(\(metricRollupsLockKey));
            TRUNCATE metric_periods, metric_rollup_active, metric_rollup_mrr, metric_rollup_starts, metric_rollup_refunds, metric_rollup_retention,
                metric_rollup_mrr_movement, metric_rollup_churn_corners, metric_rollup_churn_edges, metric_rollup_product_durations;
            INSERT INTO metric_periods \(metricPeriodsSelect(ids: nil));
            PERFORM metric_rollups_add('(SELECT m.*, 1 AS sign FROM metric_periods m)');
            -- One statement, one snapshot: a change committed before it is both deleted and counted from the archive,
            -- one committed after it is kept and not counted.
            TRUNCATE metric_rollup_refund_requests;
            WITH forgotten AS (DELETE FROM metric_refund_request_changes RETURNING 1)
            INSERT INTO metric_rollup_refund_requests (environment, bundle_id, day, notification_type, count)
            SELECT n.environment, n.bundle_id, \(utcDay("n.signed_date")), n.notification_type, count(*)
            FROM notification_archive n
            WHERE n.notification_type IN ('CONSUMPTION_REQUEST', 'REFUND', 'REFUND_DECLINED', 'REFUND_REVERSED')
                AND archived_transaction_info(n) IS NOT NULL AND coalesce(archived_transaction_info(n)->>'inAppOwnershipType', '') <> 'FAMILY_SHARED'
            GROUP BY 1, 2, 3, 4;
            UPDATE metric_rollup_state SET built = true, built_at = now();
            -- Statistics now, not when autovacuum comes: the metric functions join their rollups by estimates, and a
            -- rollup analyzed while empty made MRR a nested loop of 6 603 × 1 616 rows (0.7 s instead of 24 ms).
            ANALYZE metric_periods, metric_rollup_active, metric_rollup_mrr, metric_rollup_starts, metric_rollup_refunds, metric_rollup_retention,
                metric_rollup_mrr_movement, metric_rollup_churn_corners, metric_rollup_churn_edges, metric_rollup_product_durations,
                metric_rollup_refund_requests;
            RETURN (SELECT count(*) FROM metric_periods);
        END
        $f$
        """,
        // refresh_product_catalog() from the observations the rollups hold (no scan of `transactions`); a product
        // whose duration changes marks its subscriptions, applied next.
        """
        CREATE FUNCTION refresh_product_catalog_from_rollups() RETURNS integer VOLATILE LANGUAGE sql AS $$
            WITH ranked AS (
                SELECT product_id, duration, periods, sum(periods) OVER (PARTITION BY product_id) AS total,
                    row_number() OVER (PARTITION BY product_id ORDER BY periods DESC, duration) AS rank
                FROM metric_rollup_product_durations WHERE periods > 0
            ), upserted AS (
                INSERT INTO product_catalog AS c (product_id, duration, source, observed_periods, updated_at)
                SELECT product_id, duration, 'observed', total, now() FROM ranked WHERE rank = 1
                ON CONFLICT (product_id) DO UPDATE SET
                    duration = CASE WHEN c.source = 'manual' THEN c.duration ELSE EXCLUDED.duration END,
                    observed_periods = EXCLUDED.observed_periods, updated_at = now()
                WHERE c.observed_periods IS DISTINCT FROM EXCLUDED.observed_periods
                    OR (c.source <> 'manual' AND c.duration IS DISTINCT FROM EXCLUDED.duration)
                RETURNING 1
            )
            SELECT count(*)::integer FROM upserted
        $$
        """,

        // MARK: The metrics from the rollups (same columns as migration 14's functions)
        """
        CREATE FUNCTION metric_rollup_active_subscriptions(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, active_paid bigint, active_trials bigint, active_family_shared bigint)
        STABLE LANGUAGE sql AS $$
            WITH d AS MATERIALIZED (
                SELECT day, kind, sum(delta) AS delta FROM metric_rollup_active
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND day <= \(utcDay("p_to"))
                GROUP BY 1, 2
            )
            SELECT b.bucket_start, b.bucket_end,
                coalesce((SELECT sum(delta) FROM d WHERE kind = 'paid' AND day <= \(utcDay("b.bucket_end"))), 0)::bigint,
                coalesce((SELECT sum(delta) FROM d WHERE kind = 'trial' AND day <= \(utcDay("b.bucket_end"))), 0)::bigint,
                coalesce((SELECT sum(delta) FROM d WHERE kind = 'family' AND day <= \(utcDay("b.bucket_end"))), 0)::bigint
            FROM metric_buckets(p_from, p_to, p_bucket) b ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_mrr(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL,
            p_currency text DEFAULT 'USD')
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, currency text, mrr numeric, arr numeric, active_paid bigint, unconverted bigint)
        STABLE LANGUAGE sql AS $$
            WITH r AS MATERIALIZED (
                SELECT day, currency, purchase_day, sum(amount) AS amount, sum(periods) AS periods, sum(unpriced) AS unpriced FROM metric_rollup_mrr
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND day <= \(utcDay("p_to"))
                GROUP BY 1, 2, 3
            ), \(rollupRates(from: "r", day: "purchase_day")), daily AS (
                SELECT r.day, sum(r.amount * x.rate) AS value, sum(r.periods) AS periods,
                    sum(CASE WHEN x.rate IS NULL THEN r.periods ELSE r.unpriced END) AS unconverted
                FROM r JOIN rates x ON x.currency = r.currency AND x.day = r.purchase_day GROUP BY 1
            ), running AS MATERIALIZED (
                SELECT day, sum(value) OVER w AS value, sum(periods) OVER w AS periods, sum(unconverted) OVER w AS unconverted
                FROM daily WINDOW w AS (ORDER BY day)
            )
            SELECT b.bucket_start, b.bucket_end, p_currency, round(coalesce(x.value, 0), 2), round(coalesce(x.value, 0) * 12, 2),
                coalesce(x.periods, 0)::bigint, coalesce(x.unconverted, 0)::bigint
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN LATERAL (SELECT * FROM running WHERE running.day <= \(utcDay("b.bucket_end")) ORDER BY running.day DESC LIMIT 1) x ON true
            ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_new_subscriptions(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, new_trials bigint, new_paid bigint, new_family_shared bigint)
        STABLE LANGUAGE sql AS $$
            WITH s AS MATERIALIZED (
                SELECT day, kind, sum(count) AS count FROM metric_rollup_starts
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id)
                    AND day >= \(utcDay("p_from")) AND day < \(utcDay("p_to")) AND kind IN ('trial', 'paid', 'family')
                GROUP BY 1, 2
            )
            SELECT b.bucket_start, b.bucket_end, coalesce(sum(s.count) FILTER (WHERE s.kind = 'trial'), 0)::bigint,
                coalesce(sum(s.count) FILTER (WHERE s.kind = 'paid'), 0)::bigint, coalesce(sum(s.count) FILTER (WHERE s.kind = 'family'), 0)::bigint
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN s ON s.day >= \(utcDay("b.bucket_start")) AND s.day < \(utcDay("b.bucket_end"))
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_trial_conversion(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, trials bigint, converted bigint, pending bigint, abandoned bigint, conversion_rate numeric)
        STABLE LANGUAGE sql AS $$
            WITH s AS MATERIALIZED (
                SELECT day, kind, sum(count) AS count FROM metric_rollup_starts
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id)
                    AND day >= \(utcDay("p_from")) AND day < \(utcDay("p_to")) AND kind IN ('trial', 'trial_converted', 'trial_refused', 'trial_undecided')
                GROUP BY 1, 2
                UNION ALL
                SELECT \(utcDay("purchase_date")), 'trial_running', count(*) FROM metric_periods
                WHERE environment = p_environment AND is_trial AND NOT is_family_shared AND next_is_paid IS NOT TRUE AND effective_end_time > now()
                    AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND purchase_date >= p_from AND purchase_date < p_to
                GROUP BY 1
            ), counts AS (
                SELECT b.bucket_start, b.bucket_end, coalesce(sum(s.count) FILTER (WHERE s.kind = 'trial'), 0)::bigint AS trials,
                    coalesce(sum(s.count) FILTER (WHERE s.kind = 'trial_converted'), 0)::bigint AS converted,
                    coalesce(sum(s.count) FILTER (WHERE s.kind = 'trial_running'), 0)::bigint AS pending,
                    coalesce(sum(s.count) FILTER (WHERE s.kind IN ('trial_refused', 'trial_undecided')), 0)::bigint
                        - coalesce(sum(s.count) FILTER (WHERE s.kind = 'trial_running'), 0)::bigint AS abandoned
                FROM metric_buckets(p_from, p_to, p_bucket) b
                LEFT JOIN s ON s.day >= \(utcDay("b.bucket_start")) AND s.day < \(utcDay("b.bucket_end"))
                GROUP BY 1, 2
            )
            SELECT bucket_start, bucket_end, trials, converted, pending, abandoned, round(converted::numeric / nullif(trials, 0), 4)
            FROM counts ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_churn(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, active_at_start bigint, churned bigint, churn_rate numeric, resubscribed bigint)
        STABLE LANGUAGE sql AS $$
            WITH b AS MATERIALIZED (
                SELECT bucket_start, bucket_end, \(utcDay("bucket_start")) AS s, \(utcDay("bucket_end")) AS e FROM metric_buckets(p_from, p_to, p_bucket)
            ), active AS MATERIALIZED (
                SELECT day, sum(delta) AS delta FROM metric_rollup_active
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND kind = 'paid' AND day <= \(utcDay("p_to"))
                GROUP BY 1
            ), edges AS MATERIALIZED (
                SELECT ce, sum(weight) AS weight FROM metric_rollup_churn_edges
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND ce <= \(utcDay("p_to"))
                GROUP BY 1
            ), corners AS MATERIALIZED (
                SELECT ce, cs, sum(weight) AS weight FROM metric_rollup_churn_corners
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND ce > \(utcDay("p_from")) AND ce <= \(utcDay("p_to"))
                GROUP BY 1, 2
            ), resubscribed AS MATERIALIZED (
                SELECT day, sum(count) AS count FROM metric_rollup_starts
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND kind = 'resubscription'
                    AND day >= \(utcDay("p_from")) AND day < \(utcDay("p_to"))
                GROUP BY 1
            ), counts AS (
                SELECT b.bucket_start, b.bucket_end,
                    coalesce((SELECT sum(delta) FROM active WHERE day <= b.s), 0)::bigint AS active,
                    (coalesce((SELECT sum(weight) FROM edges WHERE ce <= b.s), 0)
                        + coalesce((SELECT sum(weight) FROM corners WHERE cs <= b.s AND ce > b.s AND ce <= b.e), 0))::bigint AS churned,
                    coalesce((SELECT sum(count) FROM resubscribed WHERE day >= b.s AND day < b.e), 0)::bigint AS resubscribed
                FROM b
            )
            SELECT bucket_start, bucket_end, active, churned, round(churned::numeric / nullif(active, 0), 4), resubscribed FROM counts ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_mrr_movement(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL,
            p_currency text DEFAULT 'USD')
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, currency text, new_mrr numeric, resubscription_mrr numeric,
            churned_mrr numeric, net_mrr numeric, unconverted bigint)
        STABLE LANGUAGE sql AS $$
            WITH b AS MATERIALIZED (
                SELECT bucket_start, bucket_end, \(utcDay("bucket_start")) AS s, \(utcDay("bucket_end")) AS e FROM metric_buckets(p_from, p_to, p_bucket)
            ), m AS MATERIALIZED (
                SELECT purchase_day, churn_day, currency, started, sum(amount) AS amount, sum(periods) AS periods, sum(unpriced) AS unpriced
                FROM metric_rollup_mrr_movement
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id)
                    AND ((purchase_day >= \(utcDay("p_from")) AND purchase_day < \(utcDay("p_to")))
                        OR (churn_day >= \(utcDay("p_from")) AND churn_day < \(utcDay("p_to"))))
                GROUP BY 1, 2, 3, 4
            ), \(rollupRates(from: "m", day: "purchase_day")), v AS (
                SELECT m.purchase_day, m.churn_day, m.started, m.amount * x.rate AS value,
                    CASE WHEN x.rate IS NULL THEN m.periods ELSE m.unpriced END AS unconverted
                FROM m JOIN rates x ON x.currency = m.currency AND x.day = m.purchase_day
            ), moves AS (
                SELECT b.bucket_start, v.started <> '' AND v.purchase_day >= b.s AND v.purchase_day < b.e AS starts_in, v.started,
                    v.churn_day >= b.s AND v.churn_day < b.e AS churns_in, v.value, v.unconverted
                FROM b JOIN v ON (v.purchase_day >= b.s AND v.purchase_day < b.e) OR (v.churn_day >= b.s AND v.churn_day < b.e)
            )
            SELECT b.bucket_start, b.bucket_end, p_currency,
                round(coalesce(sum(m.value) FILTER (WHERE m.starts_in AND m.started = 'new'), 0), 2),
                round(coalesce(sum(m.value) FILTER (WHERE m.starts_in AND m.started = 'resubscription'), 0), 2),
                round(coalesce(sum(m.value) FILTER (WHERE m.churns_in), 0), 2),
                round(coalesce(sum(m.value) FILTER (WHERE m.starts_in), 0) - coalesce(sum(m.value) FILTER (WHERE m.churns_in), 0), 2),
                coalesce(sum(m.unconverted) FILTER (WHERE m.starts_in OR m.churns_in), 0)::bigint
            FROM b LEFT JOIN moves m USING (bucket_start)
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_refunds(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL,
            p_currency text DEFAULT 'USD')
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, currency text, paid_periods bigint, refunded bigint, refund_rate numeric,
            refunded_amount numeric, unconverted bigint)
        STABLE LANGUAGE sql AS $$
            WITH r AS MATERIALIZED (
                SELECT day, currency, sum(paid) AS paid, sum(refunded) AS refunded, sum(refunded_amount) AS refunded_amount,
                    sum(refunded_unpriced) AS refunded_unpriced
                FROM metric_rollup_refunds
                WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND day >= \(utcDay("p_from")) AND day < \(utcDay("p_to"))
                GROUP BY 1, 2
            ), \(rollupRates(from: "r", day: "day")), v AS (
                SELECT r.day, r.paid, r.refunded, r.refunded_amount * x.rate AS value,
                    CASE WHEN x.rate IS NULL THEN r.refunded ELSE r.refunded_unpriced END AS unconverted
                FROM r JOIN rates x ON x.currency = r.currency AND x.day = r.day
            ), counts AS (
                SELECT b.bucket_start, b.bucket_end, coalesce(sum(v.paid), 0)::bigint AS paid, coalesce(sum(v.refunded), 0)::bigint AS refunded,
                    coalesce(sum(v.value), 0) AS value, coalesce(sum(v.unconverted), 0)::bigint AS unconverted
                FROM metric_buckets(p_from, p_to, p_bucket) b
                LEFT JOIN v ON v.day >= \(utcDay("b.bucket_start")) AND v.day < \(utcDay("b.bucket_end"))
                GROUP BY 1, 2
            )
            SELECT bucket_start, bucket_end, p_currency, paid, refunded, round(refunded::numeric / nullif(paid, 0), 4), round(value, 2), unconverted
            FROM counts ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_refund_requests(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, requested bigint, granted bigint, declined bigint, reversed bigint)
        STABLE LANGUAGE sql AS $$
            WITH c AS MATERIALIZED (
                SELECT day, notification_type, sum(count) AS count FROM (
                    SELECT day, notification_type, count FROM metric_rollup_refund_requests
                    WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND day >= \(utcDay("p_from")) AND day < \(utcDay("p_to"))
                    UNION ALL
                    SELECT day, notification_type, delta FROM metric_refund_request_changes
                    WHERE environment = p_environment AND (p_bundle_id IS NULL OR bundle_id = p_bundle_id) AND day >= \(utcDay("p_from")) AND day < \(utcDay("p_to"))
                ) x GROUP BY 1, 2
            )
            SELECT b.bucket_start, b.bucket_end,
                coalesce(sum(c.count) FILTER (WHERE c.notification_type = 'CONSUMPTION_REQUEST'), 0)::bigint,
                coalesce(sum(c.count) FILTER (WHERE c.notification_type = 'REFUND'), 0)::bigint,
                coalesce(sum(c.count) FILTER (WHERE c.notification_type = 'REFUND_DECLINED'), 0)::bigint,
                coalesce(sum(c.count) FILTER (WHERE c.notification_type = 'REFUND_REVERSED'), 0)::bigint
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN c ON c.day >= \(utcDay("b.bucket_start")) AND c.day < \(utcDay("b.bucket_end"))
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_rollup_retention(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text, p_bundle_id text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, period integer, cohort bigint, retained bigint, retention numeric)
        STABLE LANGUAGE sql AS $$
            WITH cohort AS MATERIALIZED (
                SELECT b.bucket_start, b.bucket_end, r.periods, sum(r.subscriptions) AS subscriptions
                FROM metric_buckets(p_from, p_to, p_bucket) b
                JOIN metric_rollup_retention r ON r.environment = p_environment AND (p_bundle_id IS NULL OR r.bundle_id = p_bundle_id)
                    AND r.day >= \(utcDay("b.bucket_start")) AND r.day < \(utcDay("b.bucket_end"))
                GROUP BY 1, 2, 3 HAVING sum(r.subscriptions) <> 0
            ), sizes AS (
                SELECT bucket_start, bucket_end, sum(subscriptions) AS cohort, max(periods) AS longest FROM cohort GROUP BY 1, 2
            )
            SELECT s.bucket_start, s.bucket_end, n::integer, s.cohort::bigint, r.retained, round(r.retained::numeric / s.cohort, 4)
            FROM sizes s
            CROSS JOIN LATERAL generate_series(1, GREATEST(s.longest, 1)) AS n
            CROSS JOIN LATERAL (SELECT coalesce(sum(h.subscriptions), 0)::bigint AS retained FROM cohort h
                WHERE h.bucket_start = s.bucket_start AND h.periods >= n) r
            ORDER BY 1, 3
        $$
        """,
    ])
}
