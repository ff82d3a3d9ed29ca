import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

/// A row that contradicts Apple's last word, claimed for a status pull.
public struct ContradictedSubscription: Sendable, Hashable {
    public var environment: String
    public var bundleId: String
    public var originalTransactionId: String
    public var reason: String
}

extension EntitlementStore {
    /// Claims up to `limit` contradicted rows not pulled within `retryAfter` (oldest contradiction first) and marks
    /// them pulled now. `SKIP LOCKED`: several workers claim different rows, and a row a batch holds is left for
    /// the next round. A row whose pull fails is claimed again after `retryAfter`.
    public func claimContradictedForPull(limit: Int, retryAfter: Duration) async throws -> [ContradictedSubscription] {
        let seconds = Double(retryAfter.components.seconds) + Double(retryAfter.components.attoseconds) / 1e18
        let rows = try await client.query(
            """
            UPDATE entitlements e SET contradiction_pulled_at = now()
            FROM (SELECT environment, bundle_id, original_transaction_id FROM entitlements
                WHERE contradiction IS NOT NULL AND (contradiction_pulled_at IS NULL OR contradiction_pulled_at < now() - make_interval(secs => \(seconds)))
                ORDER BY contradicted_since LIMIT \(limit) FOR UPDATE SKIP LOCKED) c
            WHERE (e.environment, e.bundle_id, e.original_transaction_id) = (c.environment, c.bundle_id, c.original_transaction_id)
            RETURNING e.environment, e.bundle_id, e.original_transaction_id, e.contradiction
            """,
            logger: logger)
        var claimed: [ContradictedSubscription] = []
        for try await (environment, bundleId, id, reason) in rows.decode((String, String, String, String).self) {
            claimed.append(ContradictedSubscription(environment: environment, bundleId: bundleId, originalTransactionId: id, reason: reason))
        }
        return claimed
    }

    /// The contradicted subscriptions of one app (`pipelinectl reconcile --contradicted`), oldest first.
    public func contradictedSubscriptions(environment: String, bundleId: String) async throws -> [String] {
        let rows = try await client.query(
            """
            SELECT original_transaction_id FROM entitlements WHERE contradiction IS NOT NULL AND environment = \(environment) AND bundle_id = \(bundleId)
            ORDER BY contradicted_since, original_transaction_id
            """,
            logger: logger)
        var ids: [String] = []
        for try await id in rows.decode(String.self) { ids.append(id) }
        return ids
    }

    /// Contradicted rows by reason (every reason present, 0 when none).
    public func contradictionCounts() async throws -> [String: Int] {
        var counts = Dictionary(uniqueKeysWithValues: EntitlementTransition.Contradiction.allCases.map { ($0.rawValue, 0) })
        let rows = try await client.query(
            "SELECT contradiction, count(*)::int FROM entitlements WHERE contradiction IS NOT NULL GROUP BY contradiction", logger: logger)
        for try await (reason, count) in rows.decode((String, Int).self) { counts[reason] = count }
        return counts
    }
}
