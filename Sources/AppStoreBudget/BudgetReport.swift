import Foundation
import Logging
import PostgresNIO

/// What `pipelinectl appstore budget` shows: each bucket's rate, how far ahead its schedule is leased (the debt every
/// new call waits behind), Apple's pause, and per lane the calls waiting and the oldest's age (from the processes'
/// reports of the last few seconds).
public struct BudgetReport: Sendable {
    public struct Lane: Sendable {
        public var lane: String
        public var waiting: Int
        public var oldestWaitSeconds: Double
        public var processes: Int
    }

    public struct Bucket: Sendable {
        public var bundleId: String
        public var environment: String
        public var endpointClass: String
        public var rate: Double
        /// Seconds of calls already leased beyond now (0 when idle).
        public var debtSeconds: Double
        /// Seconds until Apple's pause ends (nil when not paused).
        public var pausedForSeconds: Double?
        public var pauseReason: String?
        public var pauses: Int64
        public var granted: Int64
        public var lanes: [Lane]
    }

    public var buckets: [Bucket]

    /// Reports older than this are from processes gone or idle, and left out.
    public static let freshness = 5.0

    public static func read(client: PostgresClient, logger: Logger) async throws -> BudgetReport {
        var buckets: [Bucket] = []
        let rows = try await client.query(
            """
            SELECT bundle_id, environment, endpoint_class, rate,
                   greatest(0, extract(epoch FROM next_at - clock_timestamp()))::float8,
                   CASE WHEN paused_until > clock_timestamp() THEN extract(epoch FROM paused_until - clock_timestamp())::float8 END,
                   pause_reason, pauses, granted
            FROM appstore_api_budget ORDER BY bundle_id, environment, endpoint_class
            """, logger: logger)
        for try await (bundleId, environment, endpointClass, rate, debt, paused, reason, pauses, granted) in rows.decode(
            (String, String, String, Double, Double, Double?, String?, Int64, Int64).self)
        {
            buckets.append(Bucket(
                bundleId: bundleId, environment: environment, endpointClass: endpointClass, rate: rate, debtSeconds: debt, pausedForSeconds: paused,
                pauseReason: reason, pauses: pauses, granted: granted, lanes: []))
        }
        let lanes = try await client.query(
            """
            SELECT bundle_id, environment, endpoint_class, lane, sum(waiting)::bigint, coalesce(max(oldest_wait_seconds) FILTER (WHERE waiting > 0), 0)::float8,
                   count(*) FILTER (WHERE waiting > 0)
            FROM appstore_api_budget_queues WHERE reported_at > clock_timestamp() - make_interval(secs => \(Self.freshness))
            GROUP BY 1, 2, 3, 4
            """, logger: logger)
        for try await (bundleId, environment, endpointClass, lane, waiting, oldest, processes) in lanes.decode((String, String, String, String, Int64, Double, Int64).self) {
            guard let index = buckets.firstIndex(where: { $0.bundleId == bundleId && $0.environment == environment && $0.endpointClass == endpointClass }) else { continue }
            buckets[index].lanes.append(Lane(lane: lane, waiting: Int(waiting), oldestWaitSeconds: oldest, processes: Int(processes)))
        }
        return BudgetReport(buckets: buckets)
    }
}
