extension Migrations {
    /// The optional bundle, product and storefront filters of every metric, on the periods aliased `p`.
    static let periodFilters = """
        (p_bundle_id IS NULL OR p.bundle_id = p_bundle_id) AND (p_product_id IS NULL OR p.product_id = p_product_id)
                            AND (p_storefront IS NULL OR p.storefront = p_storefront)
        """

    /// CTEs `rates` and `v`: the periods of CTE `p` with `value`, their `amount` in the reporting currency `p_currency`
    /// (null when no rate is known), each rate looked up once per currency and day.
    static let convertedAmounts = """
        rates AS (
                        SELECT d.currency, d.day, metric_exchange_rate(d.currency, p_currency, d.day::timestamp AT TIME ZONE 'UTC') AS rate
                        FROM (SELECT DISTINCT p.currency, (p.purchase_date AT TIME ZONE 'UTC')::date AS day FROM p) d
                    ), v AS (
                        SELECT p.*, p.amount * r.rate AS value
                        FROM p LEFT JOIN rates r ON r.currency = p.currency AND r.day = (p.purchase_date AT TIME ZONE 'UTC')::date
                    )
        """

    /// Apple's subscription durations by the longest length each is read from, on the sandbox's accelerated clock
    /// and in production (longer than the last: a year).
    struct DurationBound {
        var sandbox: String
        var production: String
        var duration: String
    }

    static let durationBounds = [
        DurationBound(sandbox: "4 minutes", production: "10 days", duration: "P1W"),
        DurationBound(sandbox: "7 minutes 30 seconds", production: "45 days", duration: "P1M"),
        DurationBound(sandbox: "12 minutes 30 seconds", production: "75 days", duration: "P2M"),
        DurationBound(sandbox: "22 minutes 30 seconds", production: "135 days", duration: "P3M"),
        DurationBound(sandbox: "45 minutes", production: "270 days", duration: "P6M"),
    ]

    /// The `WHEN length <= … THEN …` lines of `apple_subscription_duration` for one clock, each indented by
    /// `indentation` spaces, ending with the year and the CASE's `END`.
    static func durationCase(_ bound: KeyPath<DurationBound, String>, indentation: Int) -> String {
        let indent = String(repeating: " ", count: indentation)
        let lines = durationBounds.map { "\(indent)WHEN length <= interval '\($0[keyPath: bound])' THEN '\($0.duration)'" }
        return (lines + ["\(indent)ELSE 'P1Y' END"]).joined(separator: "\n")
    }

    /// Migration 14: subscription metrics computed from our own rows, on RevenueCat's published definitions
    /// (docs/metrics.md holds each definition and the notification types that feed it).
    ///
    /// Everything is derived at query time from `transactions` (one row per subscription period, newest signedDate
    /// wins, so any delivery order ends in the same rows) plus two small tables only operators write
    /// (`product_catalog` overrides, `exchange_rates`) and one the worker writes order-independently
    /// (`transaction_grace`). Nothing here is maintained per notification beyond that, so a replay or a reorder
    /// cannot make the figures drift.
    static let metrics = Migration(version: 14, name: "subscription metrics: catalog, exchange rates, grace per period, metric functions", sql: [
        // MARK: Tables
        """
        CREATE TABLE product_catalog (
            product_id text PRIMARY KEY,
            duration text NOT NULL CHECK (duration ~ '^P[0-9]+[DWMY]$'),
            source text NOT NULL CHECK (source IN ('observed', 'manual')),
            observed_periods bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        """
        CREATE TABLE exchange_rates (
            currency text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
            reporting_currency text NOT NULL CHECK (reporting_currency ~ '^[A-Z]{3}$'),
            rate_date date NOT NULL,
            rate numeric NOT NULL CHECK (rate > 0),
            loaded_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (currency, reporting_currency, rate_date)
        )
        """,
        // A period's grace end, as Apple's renewal info told it while that period was in its grace period. Kept
        // apart from `transactions` because it must only grow (GREATEST), whatever order the notifications come in.
        """
        CREATE TABLE transaction_grace (
            transaction_id text PRIMARY KEY,
            grace_period_expires_at timestamptz NOT NULL
        )
        """,
        """
        INSERT INTO transaction_grace (transaction_id, grace_period_expires_at)
        SELECT period_transaction_id, grace_period_expires_at FROM entitlements
        WHERE period_transaction_id IS NOT NULL AND grace_period_expires_at > expires_at
        ON CONFLICT DO NOTHING
        """,
        """
        CREATE INDEX transactions_subscription_periods ON transactions (environment, bundle_id, original_transaction_id, purchase_date, transaction_id)
        WHERE type = 'Auto-Renewable Subscription'
        """,
        "CREATE INDEX notification_archive_by_type ON notification_archive (notification_type, environment, bundle_id, signed_date)",

        // MARK: Durations and money
        // Apple's subscription durations from a period's length. Sandbox renews on an accelerated clock (a month in
        // five minutes), so lengths under two hours are read on Apple's sandbox table.
        """
        CREATE FUNCTION apple_subscription_duration(length interval) RETURNS text IMMUTABLE LANGUAGE sql AS $$
            SELECT CASE
                WHEN length IS NULL THEN NULL
                WHEN length < interval '2 hours' THEN CASE
        \(durationCase(\.sandbox, indentation: 12))
        \(durationCase(\.production, indentation: 8))
        $$
        """,
        // (subscription_periods spells the common durations out in a simple CASE, which evaluates its subject once:
        // PostgreSQL does not inline an SQL function whose parameter is used several times when the argument is an
        // expression, and a call through the SQL-function executor cost 4 s on a million periods in metrics-bench.)
        // RevenueCat's monthly normalisation: week ×4, month ×1, two months ×1/2, quarter ×1/3, half year ×1/6,
        // year ×1/12; any other ISO 8601 length by the same rule (n weeks ×4/n, n months ×1/n, n years ×1/12n).
        """
        CREATE FUNCTION subscription_monthly_factor(duration text) RETURNS numeric IMMUTABLE LANGUAGE sql AS $$
            SELECT CASE duration
                WHEN 'P1M' THEN 1::numeric WHEN 'P1Y' THEN 1 / 12::numeric WHEN 'P1W' THEN 4::numeric
                WHEN 'P3M' THEN 1 / 3::numeric WHEN 'P6M' THEN 1 / 6::numeric WHEN 'P2M' THEN 1 / 2::numeric
                ELSE CASE right(duration, 1)
                WHEN 'W' THEN 4.0 / substring(duration from 2 for length(duration) - 2)::numeric
                WHEN 'M' THEN 1.0 / substring(duration from 2 for length(duration) - 2)::numeric
                WHEN 'Y' THEN 1.0 / (12 * substring(duration from 2 for length(duration) - 2)::numeric)
                WHEN 'D' THEN 30.0 / substring(duration from 2 for length(duration) - 2)::numeric
                END END
        $$
        """,
        // The rate of `currency` in `reporting` at `at`: the newest rate dated on or before that day, else the
        // oldest one after it; 1 for the reporting currency itself; null when there is none (counted as unconverted).
        """
        CREATE FUNCTION metric_exchange_rate(p_currency text, p_reporting text, p_at timestamptz) RETURNS numeric STABLE LANGUAGE sql AS $$
            SELECT CASE WHEN p_currency = p_reporting THEN 1::numeric ELSE coalesce(
                (SELECT r.rate FROM exchange_rates r WHERE r.currency = $1 AND r.reporting_currency = $2
                    AND r.rate_date <= (p_at AT TIME ZONE 'UTC')::date ORDER BY r.rate_date DESC LIMIT 1),
                (SELECT r.rate FROM exchange_rates r WHERE r.currency = $1 AND r.reporting_currency = $2
                    ORDER BY r.rate_date ASC LIMIT 1)) END
        $$
        """,
        // Fills the catalog from what was observed: per product, the most common duration of its regular periods
        // (no offer, not a commitment plan's monthly installment, not ended early by an upgrade). Manual rows stay.
        """
        CREATE FUNCTION refresh_product_catalog() RETURNS integer VOLATILE LANGUAGE sql AS $$
            WITH observed AS (
                SELECT product_id, apple_subscription_duration(expires_date - purchase_date) AS duration, count(*) AS periods
                FROM transactions
                WHERE type = 'Auto-Renewable Subscription' AND product_id IS NOT NULL AND expires_date > purchase_date
                    AND payload->>'offerType' IS NULL AND payload->>'billingPlanType' IS DISTINCT FROM 'MONTHLY'
                    AND NOT coalesce((payload->>'isUpgraded')::boolean, false)
                GROUP BY 1, 2
            ), ranked AS (
                SELECT product_id, duration, periods, sum(periods) OVER (PARTITION BY product_id) AS total,
                    row_number() OVER (PARTITION BY product_id ORDER BY periods DESC, duration) AS rank
                FROM observed
            ), upserted AS (
                INSERT INTO product_catalog AS c (product_id, duration, source, observed_periods, updated_at)
                SELECT product_id, duration, 'observed', total, now() FROM ranked WHERE rank = 1
                ON CONFLICT (product_id) DO UPDATE SET
                    duration = CASE WHEN c.source = 'manual' THEN c.duration ELSE EXCLUDED.duration END,
                    observed_periods = EXCLUDED.observed_periods, updated_at = now()
                RETURNING 1
            )
            SELECT count(*)::integer FROM upserted
        $$
        """,

        // MARK: Periods: the one derived column every metric reads
        // One row per auto-renewable subscription period (transaction). `effective_end_time` is the moment the period
        // stops granting access: its expiry, later by the grace period Apple granted it, earlier by a refund or
        // revocation, or by the next period of the same subscription starting before it ended (an upgrade or a
        // crossgrade). Access is `purchase_date <= t < effective_end_time`.
        """
        CREATE VIEW subscription_periods AS
        SELECT d.*, d.price_per_period * CASE d.duration
                WHEN 'P1M' THEN 1::numeric WHEN 'P1Y' THEN 1 / 12::numeric WHEN 'P1W' THEN 4::numeric
                WHEN 'P3M' THEN 1 / 3::numeric WHEN 'P6M' THEN 1 / 6::numeric WHEN 'P2M' THEN 1 / 2::numeric
                ELSE subscription_monthly_factor(d.duration) END AS monthly_price
        FROM (
            SELECT p.*,
                NOT p.is_trial AND NOT p.is_family_shared AS is_paid,
                p.revocation_date IS NOT NULL AND NOT p.is_upgraded AND p.revocation_type IS DISTINCT FROM 'FAMILY_REVOKE' AS is_refunded,
                CASE
                    WHEN p.billing_plan_type = 'MONTHLY' THEN 'P1M'
                    WHEN p.offer_discount_type = 'PAY_UP_FRONT' AND p.offer_period ~ '^P[0-9]+[DWMY]$' THEN p.offer_period
                    ELSE coalesce(c.duration, apple_subscription_duration(p.expires_date - p.purchase_date))
                END AS duration,
                coalesce(p.price / 1000.0,
                    (p.commitment_info->>'commitmentPrice')::numeric / 1000.0 / nullif((p.commitment_info->>'totalBillingPeriods')::numeric, 0)) AS price_per_period
            FROM (
                SELECT t.transaction_id, t.original_transaction_id, t.environment, t.bundle_id, t.product_id,
                    t.payload->>'storefront' AS storefront, t.purchase_date, t.expires_date, t.revocation_date, t.revocation_type,
                    t.price, t.currency, t.revocation_percentage, coalesce(t.ownership_type = 'FAMILY_SHARED', false) AS is_family_shared,
                    (t.payload->>'offerType')::integer AS offer_type, t.payload->>'offerDiscountType' AS offer_discount_type,
                    t.payload->>'offerPeriod' AS offer_period, t.payload->>'billingPlanType' AS billing_plan_type,
                    t.payload->'commitmentInfo' AS commitment_info,
                    coalesce((t.payload->>'isUpgraded')::boolean, false) AS is_upgraded,
                    coalesce(t.payload->>'offerDiscountType' = 'FREE_TRIAL',
                        (t.payload->>'offerType')::integer = 1 AND coalesce(t.price, 0) = 0) AS is_trial,
                    g.grace_period_expires_at,
                    LEAST(GREATEST(t.expires_date, g.grace_period_expires_at), t.revocation_date,
                        lead(t.purchase_date) OVER w) AS effective_end_time
                FROM transactions t
                LEFT JOIN transaction_grace g ON g.transaction_id = t.transaction_id
                WHERE t.type = 'Auto-Renewable Subscription' AND t.purchase_date IS NOT NULL AND t.expires_date IS NOT NULL
                WINDOW w AS (PARTITION BY t.environment, t.bundle_id, t.original_transaction_id ORDER BY t.purchase_date, t.transaction_id)
            ) p
            LEFT JOIN product_catalog c ON c.product_id = p.product_id
        ) d
        """,
        // The paid periods (not a free trial, not family-shared) with their neighbours in the same subscription:
        // the first paid period is a new paid subscription; a paid period that starts after the previous one's
        // access ended (beyond the expiry leeway) is a resubscription (a billing-retry recovery after expiry is one);
        // a paid period whose access ends with no paid period starting by then is a churn, at its effective end.
        """
        CREATE VIEW subscription_paid_periods AS
        SELECT p.*,
            lag(p.transaction_id) OVER w IS NULL AS is_first_paid,
            lag(p.effective_end_time) OVER w AS previous_paid_end,
            lead(p.purchase_date) OVER w AS next_paid_start,
            lag(p.effective_end_time) OVER w + s.leeway < p.purchase_date AS is_resubscription,
            CASE WHEN lead(p.purchase_date) OVER w IS NULL OR lead(p.purchase_date) OVER w > p.effective_end_time + s.leeway
                THEN p.effective_end_time END AS churned_at
        FROM subscription_periods p
        CROSS JOIN (SELECT coalesce((SELECT expiry_leeway FROM entitlement_settings), interval '0') AS leeway) s
        WHERE p.is_paid AND p.effective_end_time > p.purchase_date
        WINDOW w AS (PARTITION BY p.environment, p.bundle_id, p.original_transaction_id ORDER BY p.purchase_date, p.transaction_id)
        """,
        // Buckets of a range, in UTC, clipped to it: [bucket_start, bucket_end).
        """
        CREATE FUNCTION metric_buckets(p_from timestamptz, p_to timestamptz, p_bucket text)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz) STABLE LANGUAGE sql SET timezone TO 'UTC' AS $$
            SELECT GREATEST(b, p_from), LEAST(b + step, p_to)
            FROM (SELECT CASE p_bucket WHEN 'quarter' THEN interval '3 months' ELSE ('1 ' || p_bucket)::interval END AS step
                  WHERE p_bucket IN ('day', 'week', 'month', 'quarter', 'year') AND p_from < p_to) s
            CROSS JOIN generate_series(date_trunc(p_bucket, p_from, 'UTC'), p_to - interval '1 microsecond', s.step) AS b
        $$
        """,

        // MARK: Metrics. Each takes the range [p_from, p_to), a bucket, the environment (never mixed), and optional
        // bundle, product and storefront filters (null: all); money ones a reporting currency.
        """
        CREATE FUNCTION metric_active_subscriptions(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, active_paid bigint, active_trials bigint, active_family_shared bigint)
        STABLE LANGUAGE sql AS $$
            WITH p AS MATERIALIZED (
                SELECT p.original_transaction_id, p.bundle_id, p.purchase_date, p.effective_end_time, p.is_paid, p.is_trial, p.is_family_shared
                FROM subscription_periods p
                WHERE p.environment = p_environment AND p.purchase_date < p_to AND p.effective_end_time > p_from AND \(periodFilters)
            )
            SELECT b.bucket_start, b.bucket_end,
                count(DISTINCT (p.bundle_id, p.original_transaction_id)) FILTER (WHERE p.is_paid),
                count(DISTINCT (p.bundle_id, p.original_transaction_id)) FILTER (WHERE p.is_trial AND NOT p.is_family_shared),
                count(DISTINCT (p.bundle_id, p.original_transaction_id)) FILTER (WHERE p.is_family_shared)
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN p ON p.purchase_date < b.bucket_end AND p.effective_end_time >= b.bucket_end
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_mrr(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL, p_currency text DEFAULT 'USD')
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, currency text, mrr numeric, arr numeric, active_paid bigint, unconverted bigint)
        STABLE LANGUAGE sql AS $$
            WITH p AS MATERIALIZED (
                SELECT p.transaction_id, p.purchase_date, p.effective_end_time, p.monthly_price AS amount, p.currency
                FROM subscription_periods p
                WHERE p.environment = p_environment AND p.is_paid AND p.purchase_date < p_to AND p.effective_end_time > p_from AND \(periodFilters)
            ), \(convertedAmounts)
            SELECT b.bucket_start, b.bucket_end, p_currency, round(coalesce(sum(v.value), 0), 2), round(coalesce(sum(v.value), 0) * 12, 2),
                count(v.transaction_id), count(v.transaction_id) FILTER (WHERE v.value IS NULL)
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN v ON v.purchase_date < b.bucket_end AND v.effective_end_time >= b.bucket_end
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        """
        CREATE FUNCTION metric_new_subscriptions(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, new_trials bigint, new_paid bigint, new_family_shared bigint)
        STABLE LANGUAGE sql AS $$
            WITH b AS MATERIALIZED (SELECT * FROM metric_buckets(p_from, p_to, p_bucket)),
            starts AS MATERIALIZED (
                SELECT 'trial' AS kind, p.purchase_date FROM subscription_periods p
                WHERE p.environment = p_environment AND p.is_trial AND NOT p.is_family_shared
                    AND p.purchase_date >= p_from AND p.purchase_date < p_to AND \(periodFilters)
                UNION ALL
                SELECT 'paid', p.purchase_date FROM subscription_paid_periods p
                WHERE p.environment = p_environment AND p.is_first_paid
                    AND p.purchase_date >= p_from AND p.purchase_date < p_to AND \(periodFilters)
                UNION ALL
                SELECT 'family', min(p.purchase_date) FROM subscription_periods p
                WHERE p.environment = p_environment AND p.is_family_shared AND \(periodFilters)
                GROUP BY p.bundle_id, p.original_transaction_id
            )
            SELECT b.bucket_start, b.bucket_end, count(*) FILTER (WHERE s.kind = 'trial'), count(*) FILTER (WHERE s.kind = 'paid'),
                count(*) FILTER (WHERE s.kind = 'family')
            FROM b LEFT JOIN starts s ON s.purchase_date >= b.bucket_start AND s.purchase_date < b.bucket_end
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        // Trials by the bucket they started in: converted (a paid period followed and its first one was not
        // refunded), pending (no paid period yet and the trial still grants access), abandoned (the rest).
        """
        CREATE FUNCTION metric_trial_conversion(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, trials bigint, converted bigint, pending bigint, abandoned bigint, conversion_rate numeric)
        STABLE LANGUAGE sql AS $$
            WITH periods AS (
                SELECT p.*, lead(p.is_paid) OVER w AS next_is_paid, lead(p.is_refunded) OVER w AS next_is_refunded
                FROM subscription_periods p
                WHERE p.environment = p_environment AND (p_bundle_id IS NULL OR p.bundle_id = p_bundle_id)
                WINDOW w AS (PARTITION BY p.environment, p.bundle_id, p.original_transaction_id ORDER BY p.purchase_date, p.transaction_id)
            ), trials AS MATERIALIZED (
                SELECT t.purchase_date, CASE WHEN t.next_is_paid THEN NOT t.next_is_refunded END AS converted, t.effective_end_time > now() AS running
                FROM periods t
                WHERE t.is_trial AND NOT t.is_family_shared AND t.purchase_date >= p_from AND t.purchase_date < p_to
                    AND (p_product_id IS NULL OR t.product_id = p_product_id) AND (p_storefront IS NULL OR t.storefront = p_storefront)
            )
            SELECT b.bucket_start, b.bucket_end, count(t.purchase_date),
                count(*) FILTER (WHERE t.converted),
                count(*) FILTER (WHERE t.converted IS NULL AND t.running),
                count(*) FILTER (WHERE NOT t.converted OR (t.converted IS NULL AND NOT t.running)),
                round(count(*) FILTER (WHERE t.converted)::numeric / nullif(count(t.purchase_date), 0), 4)
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN trials t ON t.purchase_date >= b.bucket_start AND t.purchase_date < b.bucket_end
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        // Churn: paid subscriptions active at the bucket's start whose paid access ended in the bucket with no paid
        // period continuing it and that have not resubscribed by its end (RevenueCat: "active subscriptions lost in
        // the period that have not yet resubscribed"), over the paid subscriptions active at the start. Auto-renew off is not churn until
        // the period ends; a billing retry without grace churns at expiry and a later recovery is a resubscription.
        """
        CREATE FUNCTION metric_churn(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, active_at_start bigint, churned bigint, churn_rate numeric, resubscribed bigint)
        STABLE LANGUAGE sql AS $$
            WITH b AS MATERIALIZED (SELECT * FROM metric_buckets(p_from, p_to, p_bucket)),
            p AS MATERIALIZED (
                SELECT p.bundle_id, p.original_transaction_id, p.purchase_date, p.effective_end_time, p.churned_at, p.is_resubscription
                FROM subscription_paid_periods p
                WHERE p.environment = p_environment AND p.purchase_date < p_to AND p.effective_end_time >= p_from AND \(periodFilters)
            ), active AS (
                SELECT DISTINCT b.bucket_start, p.bundle_id, p.original_transaction_id
                FROM b JOIN p ON p.purchase_date < b.bucket_start AND p.effective_end_time >= b.bucket_start
            ), active_at_end AS (
                SELECT DISTINCT b.bucket_start, p.bundle_id, p.original_transaction_id
                FROM b JOIN p ON p.purchase_date < b.bucket_end AND p.effective_end_time >= b.bucket_end
            ), churned AS (
                SELECT DISTINCT b.bucket_start, p.bundle_id, p.original_transaction_id
                FROM b JOIN p ON p.churned_at >= b.bucket_start AND p.churned_at < b.bucket_end
                EXCEPT
                SELECT bucket_start, bundle_id, original_transaction_id FROM active_at_end
            ), counts AS (
                SELECT a.bucket_start, count(*) AS active, count(c.original_transaction_id) AS churned
                FROM active a LEFT JOIN churned c USING (bucket_start, bundle_id, original_transaction_id)
                GROUP BY 1
            ), resubscribed AS (
                SELECT b.bucket_start, count(*) AS resubscribed
                FROM b JOIN p ON p.is_resubscription AND p.purchase_date >= b.bucket_start AND p.purchase_date < b.bucket_end
                GROUP BY 1
            )
            SELECT b.bucket_start, b.bucket_end, coalesce(c.active, 0), coalesce(c.churned, 0),
                round(coalesce(c.churned, 0)::numeric / nullif(c.active, 0), 4), coalesce(r.resubscribed, 0)
            FROM b LEFT JOIN counts c USING (bucket_start) LEFT JOIN resubscribed r USING (bucket_start)
            ORDER BY 1
        $$
        """,
        // MRR movement in a bucket: new (first paid periods), resubscribed (paid periods after a gap), churned (the
        // monthly value of the periods whose churn falls in the bucket), net.
        """
        CREATE FUNCTION metric_mrr_movement(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL, p_currency text DEFAULT 'USD')
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, currency text, new_mrr numeric, resubscription_mrr numeric,
            churned_mrr numeric, net_mrr numeric, unconverted bigint)
        STABLE LANGUAGE sql AS $$
            WITH p AS MATERIALIZED (
                SELECT p.purchase_date, p.churned_at, p.is_first_paid, p.is_resubscription, p.monthly_price AS amount, p.currency
                FROM subscription_paid_periods p
                WHERE p.environment = p_environment AND ((p.purchase_date >= p_from AND p.purchase_date < p_to)
                    OR (p.churned_at >= p_from AND p.churned_at < p_to)) AND \(periodFilters)
            ), \(convertedAmounts), moves AS (
                SELECT b.bucket_start,
                    CASE WHEN v.is_first_paid AND v.purchase_date >= b.bucket_start AND v.purchase_date < b.bucket_end THEN 'new'
                        WHEN v.is_resubscription AND v.purchase_date >= b.bucket_start AND v.purchase_date < b.bucket_end THEN 'resubscription' END AS started,
                    v.churned_at >= b.bucket_start AND v.churned_at < b.bucket_end AS churned,
                    v.value
                FROM metric_buckets(p_from, p_to, p_bucket) b
                JOIN v ON (v.purchase_date >= b.bucket_start AND v.purchase_date < b.bucket_end)
                    OR (v.churned_at >= b.bucket_start AND v.churned_at < b.bucket_end)
            )
            SELECT b.bucket_start, b.bucket_end, p_currency,
                round(coalesce(sum(m.value) FILTER (WHERE m.started = 'new'), 0), 2),
                round(coalesce(sum(m.value) FILTER (WHERE m.started = 'resubscription'), 0), 2),
                round(coalesce(sum(m.value) FILTER (WHERE m.churned), 0), 2),
                round(coalesce(sum(m.value) FILTER (WHERE m.started IS NOT NULL), 0) - coalesce(sum(m.value) FILTER (WHERE m.churned), 0), 2),
                count(*) FILTER (WHERE m.value IS NULL AND (m.started IS NOT NULL OR m.churned))
            FROM metric_buckets(p_from, p_to, p_bucket) b LEFT JOIN moves m USING (bucket_start)
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        // Refund rate by the refunded period's bucket (its purchase date), not the day the refund came.
        """
        CREATE FUNCTION metric_refunds(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL, p_currency text DEFAULT 'USD')
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, currency text, paid_periods bigint, refunded bigint, refund_rate numeric,
            refunded_amount numeric, unconverted bigint)
        STABLE LANGUAGE sql AS $$
            WITH p AS MATERIALIZED (
                SELECT p.transaction_id, p.purchase_date, p.is_refunded, p.price / 1000.0 * coalesce(p.revocation_percentage, 100000) / 100000.0 AS amount,
                    p.currency
                FROM subscription_periods p
                WHERE p.environment = p_environment AND p.is_paid AND p.purchase_date >= p_from AND p.purchase_date < p_to AND \(periodFilters)
            ), \(convertedAmounts)
            SELECT b.bucket_start, b.bucket_end, p_currency, count(v.transaction_id), count(*) FILTER (WHERE v.is_refunded),
                round(count(*) FILTER (WHERE v.is_refunded)::numeric / nullif(count(v.transaction_id), 0), 4),
                round(coalesce(sum(v.value) FILTER (WHERE v.is_refunded), 0), 2),
                count(*) FILTER (WHERE v.is_refunded AND v.value IS NULL)
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN v ON v.purchase_date >= b.bucket_start AND v.purchase_date < b.bucket_end
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        // The transaction a notification is about, decoded, whichever way the archive stores it.
        archivedTransactionInfoFunction,
        // Refund requests by outcome, counted in the bucket the notification was signed in: requested
        // (CONSUMPTION_REQUEST), granted (REFUND), declined (REFUND_DECLINED), reversed (REFUND_REVERSED).
        """
        CREATE FUNCTION metric_refund_requests(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, requested bigint, granted bigint, declined bigint, reversed bigint)
        STABLE LANGUAGE sql AS $$
            WITH outcomes AS (
                SELECT n.notification_type, n.signed_date, archived_transaction_info(n) AS t
                FROM notification_archive n
                WHERE n.notification_type IN ('CONSUMPTION_REQUEST', 'REFUND', 'REFUND_DECLINED', 'REFUND_REVERSED')
                    AND n.environment = p_environment AND (p_bundle_id IS NULL OR n.bundle_id = p_bundle_id)
                    AND n.signed_date >= p_from AND n.signed_date < p_to
            )
            SELECT b.bucket_start, b.bucket_end,
                count(o.t) FILTER (WHERE o.notification_type = 'CONSUMPTION_REQUEST'),
                count(o.t) FILTER (WHERE o.notification_type = 'REFUND'),
                count(o.t) FILTER (WHERE o.notification_type = 'REFUND_DECLINED'),
                count(o.t) FILTER (WHERE o.notification_type = 'REFUND_REVERSED')
            FROM metric_buckets(p_from, p_to, p_bucket) b
            LEFT JOIN outcomes o ON o.signed_date >= b.bucket_start AND o.signed_date < b.bucket_end
                AND (p_product_id IS NULL OR o.t->>'productId' = p_product_id) AND (p_storefront IS NULL OR o.t->>'storefront' = p_storefront)
                AND coalesce(o.t->>'inAppOwnershipType', '') <> 'FAMILY_SHARED'
            GROUP BY 1, 2 ORDER BY 1
        $$
        """,
        // Subscription retention by cohort: the subscriptions whose first paid period started in the bucket, and how
        // many of them paid for at least N periods (refunded periods do not count as paid), N = 1 … the longest.
        """
        CREATE FUNCTION metric_retention(p_from timestamptz, p_to timestamptz, p_bucket text, p_environment text,
            p_bundle_id text DEFAULT NULL, p_product_id text DEFAULT NULL, p_storefront text DEFAULT NULL)
        RETURNS TABLE (bucket_start timestamptz, bucket_end timestamptz, period integer, cohort bigint, retained bigint, retention numeric)
        STABLE LANGUAGE sql AS $$
            WITH p AS MATERIALIZED (
                SELECT p.bundle_id, p.original_transaction_id, p.purchase_date, p.is_first_paid, p.is_refunded, p.product_id, p.storefront
                FROM subscription_paid_periods p
                WHERE p.environment = p_environment AND (p_bundle_id IS NULL OR p.bundle_id = p_bundle_id)
            ), paid AS (
                SELECT bundle_id, original_transaction_id, count(*) FILTER (WHERE NOT is_refunded) AS periods FROM p GROUP BY 1, 2
            ), cohort AS MATERIALIZED (
                SELECT b.bucket_start, b.bucket_end, n.periods
                FROM metric_buckets(p_from, p_to, p_bucket) b
                JOIN p f ON f.is_first_paid AND f.purchase_date >= b.bucket_start AND f.purchase_date < b.bucket_end
                    AND (p_product_id IS NULL OR f.product_id = p_product_id) AND (p_storefront IS NULL OR f.storefront = p_storefront)
                JOIN paid n USING (bundle_id, original_transaction_id)
            ), histogram AS (
                SELECT bucket_start, periods, count(*) AS subscriptions FROM cohort GROUP BY 1, 2
            ), sizes AS (
                SELECT bucket_start, bucket_end, count(*) AS cohort, max(periods) AS longest FROM cohort GROUP BY 1, 2
            )
            SELECT s.bucket_start, s.bucket_end, n::integer, s.cohort, r.retained, round(r.retained::numeric / s.cohort, 4)
            FROM sizes s
            CROSS JOIN LATERAL generate_series(1, GREATEST(s.longest, 1)) AS n
            CROSS JOIN LATERAL (SELECT coalesce(sum(h.subscriptions), 0)::bigint AS retained FROM histogram h
                WHERE h.bucket_start = s.bucket_start AND h.periods >= n) r
            ORDER BY 1, 3
        $$
        """,
    ])
}
