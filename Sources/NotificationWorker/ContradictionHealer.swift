import AppStoreNotifications
import AppStorePull
import EntitlementStore
import Logging
import ServiceLifecycle
import ServiceRuntime

/// Heals rows that contradict Apple's last word: every `interval`, claims the contradicted rows (several workers
/// claim different ones) and asks Apple for each subscription's statuses through the path `pipelinectl reconcile`
/// uses (Get All Subscription Statuses → a status snapshot on the notifications topic → the workers → the one
/// state machine). The snapshot clears the mark when it resolves the contradiction.
///
/// Why in the worker and not the catch-up CronJob: a contradicted row may be denying a paying customer right now;
/// the worker notices it in the batch that made it and the pull lands seconds later, whereas the CronJob runs
/// every 15 minutes and only where it is configured. It runs only where the `APPSTORE_*` key is configured;
/// without one, `pipelinectl reconcile --contradicted` does the same by hand.
struct ContradictionHealer: Service {
    let store: EntitlementStore
    /// One reconciler per environment (Apple's API has a base URL per environment).
    let reconcilers: [AppStoreNotifications.Environment: StatusReconciler]
    let apps: [AppIdentity]
    let interval: Duration
    let retryAfter: Duration
    let metrics: WorkerMetrics
    let logger: Logger

    func run() async throws {
        await repeatUntilGracefulShutdown(every: interval) { await healOnce() }
        for reconciler in reconcilers.values { await reconciler.api.shutdown() }
    }

    func healOnce() async {
        let claimed: [ContradictedSubscription]
        do {
            claimed = try await store.claimContradictedForPull(limit: 20, retryAfter: retryAfter)
        } catch {
            logger.debug("could not read contradicted rows: \(error)")
            return
        }
        for row in claimed {
            guard let environment = AppStoreNotifications.Environment(rawValue: row.environment), let reconciler = reconcilers[environment],
                apps.contains(where: { $0.bundleId == row.bundleId && $0.environments.contains(environment) })
            else {
                metrics.contradictionPull("not_configured")
                continue
            }
            var summary = PullSummary()
            var before: [String: EntitlementSummary?] = [:]
            var produced: [String: String] = [:]
            do {
                try await reconciler.reconcile(row.originalTransactionId, bundleId: row.bundleId, environment: environment, summary: &summary, before: &before, produced: &produced)
                metrics.contradictionPull(summary.unknownIds.isEmpty ? "pulled" : "unknown_to_apple")
                logger.info("pulled Apple's statuses for a contradicted row", metadata: [
                    "original_transaction_id": "\(row.originalTransactionId)", "reason": "\(row.reason)", "snapshots": "\(summary.snapshots)",
                ])
            } catch {
                metrics.contradictionPull("failed")
                logger.warning("status pull for a contradicted row failed; retried later", metadata: [
                    "original_transaction_id": "\(row.originalTransactionId)", "error": "\(error)",
                ])
            }
        }
    }
}
