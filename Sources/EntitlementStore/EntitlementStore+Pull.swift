import Foundation
import PostgresNIO

/// A reconcile's or an import's place in its list of ids.
public struct PullCheckpoint: Sendable, Hashable {
    public var id: Int64
    /// How many ids of the list are done.
    public var position: Int
    public var resumed: Bool
}

/// What an entitlement row says, for before/after comparisons.
public struct EntitlementSummary: Sendable, Hashable {
    public var status: String
    public var expiresAt: Int64?
    public var productId: String?
}

/// A pending or answered consumption request.
public struct ConsumptionRequestRecord: Sendable, Hashable {
    public var notificationUUID: String
    public var environment: String
    public var bundleId: String
    public var transactionId: String
    public var productType: String?
    public var reason: String?
    public var requestedAt: Int64
    public var deadline: Int64
    public var answeredAt: Int64?
}

extension EntitlementStore {
    /// The unfinished run of `command` with `argumentsKey`, or a new one over `total` ids.
    public func openPullRun(command: String, argumentsKey: String, total: Int, restart: Bool) async throws -> PullCheckpoint {
        if restart {
            try await client.query(
                "UPDATE pull_runs SET completed_at = now(), last_error = 'restarted' WHERE command = \(command) AND arguments_key = \(argumentsKey) AND completed_at IS NULL",
                logger: logger)
        }
        let rows = try await client.query(
            "SELECT id, position FROM pull_runs WHERE command = \(command) AND arguments_key = \(argumentsKey) AND completed_at IS NULL", logger: logger)
        for try await (id, position) in rows.decode((Int64, Int).self) { return PullCheckpoint(id: id, position: position, resumed: true) }
        let inserted = try await client.query(
            "INSERT INTO pull_runs (command, arguments_key, total) VALUES (\(command), \(argumentsKey), \(total)) RETURNING id", logger: logger)
        for try await id in inserted.decode(Int64.self) { return PullCheckpoint(id: id, position: 0, resumed: false) }
        throw BackfillRunMissing()
    }

    public func savePullRun(id: Int64, position: Int) async throws {
        try await client.query("UPDATE pull_runs SET position = \(position), updated_at = now(), last_error = NULL WHERE id = \(id)", logger: logger)
    }

    /// Closes a run that reached its end, or records why it stopped (it stays resumable).
    public func finishPullRun(id: Int64, error: String?) async throws {
        if let error {
            try await client.query("UPDATE pull_runs SET last_error = \(error), updated_at = now() WHERE id = \(id)", logger: logger)
        } else {
            try await client.query("UPDATE pull_runs SET completed_at = now(), updated_at = now() WHERE id = \(id)", logger: logger)
        }
    }

    /// Status, expiry and product of these subscriptions' rows.
    public func entitlementSummaries(environment: String, bundleId: String, originalTransactionIds: [String]) async throws -> [String: EntitlementSummary] {
        guard !originalTransactionIds.isEmpty else { return [:] }
        var result: [String: EntitlementSummary] = [:]
        let rows = try await client.query(
            """
            SELECT original_transaction_id, status, (extract(epoch FROM expires_at) * 1000)::bigint, product_id FROM entitlements
            WHERE environment = \(environment) AND bundle_id = \(bundleId) AND original_transaction_id = ANY(\(originalTransactionIds)::text[])
            """,
            logger: logger)
        for try await (id, status, expires, product) in rows.decode((String, String, Int64?, String?).self) {
            result[id] = EntitlementSummary(status: status, expiresAt: expires, productId: product)
        }
        return result
    }

    /// Subscriptions whose state may be wrong with nothing to say so: not ended (expired, refunded, revoked,
    /// migrated) yet past a date by which Apple would have said something — the period's expiry or the grace
    /// period's end with no notification since, or 60 days of billing retry (Apple's longest) — and, with
    /// `notUpdatedFor`, any row untouched that long.
    public func staleSubscriptions(environment: String, bundleId: String, notUpdatedForMilliseconds: Int64?) async throws -> [String] {
        let older = notUpdatedForMilliseconds ?? -1
        var ids: [String] = []
        let rows = try await client.query(
            """
            SELECT original_transaction_id FROM entitlements
            WHERE environment = \(environment) AND bundle_id = \(bundleId)
              AND ((status NOT IN ('expired', 'refunded', 'revoked', 'migrated') AND (
                        (expires_at < now() AND last_signed_date < expires_at)
                        OR (status = 'gracePeriod' AND grace_period_expires_at < now() AND last_signed_date < grace_period_expires_at)
                        OR (status = 'billingRetry' AND last_signed_date < now() - interval '60 days')))
                   OR (\(older) >= 0 AND updated_at < now() - make_interval(secs => \(older) / 1000.0)))
            ORDER BY \(unescaped: Self.renewalOrder)
            """,
            logger: logger)
        for try await id in rows.decode(String.self) { ids.append(id) }
        return ids
    }

    /// A sweep's order: the rows whose state is about to matter first, by the distance of their next renewal (or
    /// grace end) from the start of today (UTC), so the order holds for a day and a resumed run finds its place; rows
    /// with no date last.
    static let renewalOrder = """
        abs(extract(epoch FROM coalesce(grace_period_expires_at, expires_at) - date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')) NULLS LAST,
        original_transaction_id
        """

    /// Every subscription of the app, the next renewals first (`renewalOrder`).
    public func allSubscriptions(environment: String, bundleId: String) async throws -> [String] {
        var ids: [String] = []
        let rows = try await client.query(
            "SELECT original_transaction_id FROM entitlements WHERE environment = \(environment) AND bundle_id = \(bundleId) ORDER BY \(unescaped: Self.renewalOrder)",
            logger: logger)
        for try await id in rows.decode(String.self) { ids.append(id) }
        return ids
    }

    public func historyRevision(environment: String, bundleId: String, transactionId: String) async throws -> String? {
        let rows = try await client.query(
            "SELECT revision FROM transaction_history_revisions WHERE environment = \(environment) AND bundle_id = \(bundleId) AND transaction_id = \(transactionId)",
            logger: logger)
        for try await revision in rows.decode(String.self) { return revision }
        return nil
    }

    public func saveHistoryRevision(environment: String, bundleId: String, transactionId: String, revision: String, added: Int) async throws {
        try await client.query(
            """
            INSERT INTO transaction_history_revisions (environment, bundle_id, transaction_id, revision, transactions)
            VALUES (\(environment), \(bundleId), \(transactionId), \(revision), \(added))
            ON CONFLICT (environment, bundle_id, transaction_id) DO UPDATE
                SET revision = EXCLUDED.revision, transactions = transaction_history_revisions.transactions + EXCLUDED.transactions, updated_at = now()
            """,
            logger: logger)
    }

    /// Consumption requests, soonest deadline first: only unanswered ones unless `all`.
    public func consumptionRequests(all: Bool = false, transactionId: String? = nil) async throws -> [ConsumptionRequestRecord] {
        var result: [ConsumptionRequestRecord] = []
        let rows = try await client.query(
            """
            SELECT notification_uuid, environment, bundle_id, transaction_id, product_type, reason, (extract(epoch FROM requested_at) * 1000)::bigint,
                (extract(epoch FROM deadline) * 1000)::bigint, (extract(epoch FROM answered_at) * 1000)::bigint
            FROM consumption_requests
            WHERE (\(all) OR answered_at IS NULL) AND (\(transactionId)::text IS NULL OR transaction_id = \(transactionId))
            ORDER BY deadline, notification_uuid
            """,
            logger: logger)
        for try await (uuid, environment, bundle, transaction, productType, reason, requested, deadline, answered) in rows.decode(
            (String, String, String, String, String?, String?, Int64, Int64, Int64?).self)
        {
            result.append(ConsumptionRequestRecord(
                notificationUUID: uuid, environment: environment, bundleId: bundle, transactionId: transaction, productType: productType, reason: reason,
                requestedAt: requested, deadline: deadline, answeredAt: answered))
        }
        return result
    }

    /// How many consumption requests wait for an answer, and the nearest deadline (ms), for the metrics.
    public func pendingConsumptionSummary() async throws -> (count: Int, nearestDeadline: Int64?) {
        let rows = try await client.query(
            "SELECT count(*)::int, (extract(epoch FROM min(deadline)) * 1000)::bigint FROM consumption_requests WHERE answered_at IS NULL", logger: logger)
        for try await (count, nearest) in rows.decode((Int, Int64?).self) { return (count, nearest) }
        return (0, nil)
    }

    /// Records Apple's acceptance of an answer to every pending request for `transactionId`.
    public func recordConsumptionAnswer(transactionId: String, answer: String) async throws {
        try await client.query(
            "UPDATE consumption_requests SET answered_at = now(), answer = \(answer)::jsonb WHERE transaction_id = \(transactionId) AND answered_at IS NULL",
            logger: logger)
    }
}
