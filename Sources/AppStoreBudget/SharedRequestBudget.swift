import AppStoreServerAPI
import EntitlementStore
import Foundation
import Logging
import Metrics
import PostgresNIO

/// The App Store Server API budget every process shares, held in PostgreSQL (where every process already meets):
/// one row per (app, environment, endpoint class) holding the schedule's next free slot. A process leases a small
/// grant of consecutive slots in one `UPDATE` (GCRA: the slots of all grants never overlap, so the sum of every
/// process's calls stays within the rate, however many there are) and spends them locally, one call per slot.
/// A process that dies holding a grant costs at most that grant (its unused slots pass); nothing has to expire.
///
/// Lanes: a lane may lease only while the schedule is leased no further ahead than its lead; the purchase lane's lead
/// is long, every lower lane's a few grants, shorter the lower the lane. So a sweep takes only what the lanes above
/// leave, and a purchase waits behind lower lanes for at most their lead plus a grant (160 ms at 50/s).
/// Apple's 429 or 503 with `Retry-After` moves the schedule and sets a pause on the row: every process reads it just
/// before each call, so only calls already on their way when Apple answered can meet the pause. docs/appstore-budget.md.
public actor SharedRequestBudget: AppStoreRequestBudget {
    /// The budget's own reads and writes of PostgreSQL end within this (`withDeadline`): a lease whose pool has
    /// stopped, or a primary that does not answer, fails the call that waits for it instead of holding it, and every
    /// call behind it, for ever (a test once hung on a lease whose pool it had stopped).
    static let databaseDeadline: Duration = .seconds(10)

    /// How long one grant lasts at the bucket's rate (at least one slot).
    public static let grantSeconds = 0.04

    /// How far ahead the schedule may already be leased for `lane` to lease more, in grants (the purchase lane: seconds).
    static func lead(_ lane: AppStoreAPILane, grant: Double) -> Double {
        switch lane {
        case .purchase: max(2, grant)
        case .healing, .console: 3 * grant
        case .backfill: 2 * grant
        case .sweep: grant
        }
    }

    struct BucketState {
        var slots: [ContinuousClock.Instant] = []
        var waiting: [AppStoreAPILane: Int] = [:]
        var oldestWait: [AppStoreAPILane: [Int: ContinuousClock.Instant]] = [:]
        var leasing: Task<LeaseOutcome, any Error>?
        var ensured = false
        var lastReport: ContinuousClock.Instant?
    }

    enum LeaseOutcome: Sendable {
        case granted(firstSlotIn: Double, count: Int)
        case refused(readyIn: Double)
    }

    let client: PostgresClient
    let holder: String
    let logger: Logger
    private var buckets: [AppStoreBudgetBucket: BucketState] = [:]
    private var nextWaiter = 0
    private let clock = ContinuousClock()

    /// `holder` names this process in `pipelinectl appstore budget` (host and pid by default).
    public init(client: PostgresClient, holder: String? = nil, logger: Logger) {
        self.client = client
        self.holder = holder ?? "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier)"
        self.logger = logger
    }

    public func acquire(_ bucket: AppStoreBudgetBucket, lane: AppStoreAPILane, perSecond: Double, maximumWait: Duration) async throws {
        let started = clock.now
        let interval = 1 / perSecond
        let waiter = nextWaiter
        nextWaiter += 1
        buckets[bucket, default: BucketState()].waiting[lane, default: 0] += 1
        buckets[bucket]!.oldestWait[lane, default: [:]][waiter] = started
        defer {
            buckets[bucket]!.waiting[lane]! -= 1
            buckets[bucket]!.oldestWait[lane]![waiter] = nil
        }
        while true {
            try Task.checkCancellation()
            let now = clock.now
            // A slot missed by more than one interval is dropped, never spent late beside its successor.
            buckets[bucket]!.slots.removeAll { now - $0 > .seconds(max(interval, 0.02)) }
            let betterWaiting = buckets[bucket]!.waiting.contains { $0.key < lane && $0.value > 0 }
            if !betterWaiting, let slot = buckets[bucket]!.slots.first {
                let wait = slot - now
                // A slot whose time has come is spent whatever the caller has waited so far (refusing it would only
                // waste it); a later one only when it comes within the caller's wait.
                if wait > .zero, wait > maximumWait - (now - started) { throw AppStoreBudgetRefusal(wait: wait) }
                buckets[bucket]!.slots.removeFirst()
                if wait > .zero { try await Task.sleep(until: slot, clock: clock) }
                // A pause another process recorded since this slot was leased: the slot is void (and so are the
                // others held here), and the next lease starts after the pause.
                if try await pausedNow(bucket) {
                    buckets[bucket]!.slots.removeAll()
                    continue
                }
                Self.record(bucket, lane: lane, waited: clock.now - started)
                return
            }
            if betterWaiting, !buckets[bucket]!.slots.isEmpty {
                try await Task.sleep(for: .milliseconds(2))  // the lane above takes these slots first
                continue
            }
            // One lease at a time per bucket; the task that leases also hands the slots over and clears itself,
            // so whoever awaits it finds the slots (or the refusal) when it resumes.
            let running: Task<LeaseOutcome, any Error>
            if let current = buckets[bucket]!.leasing {
                running = current
            } else {
                let state = buckets[bucket]!
                let best = state.waiting.filter { $0.value > 0 }.keys.min() ?? lane
                let count = max(1, min(Int((perSecond * Self.grantSeconds).rounded(.down)), state.waiting[best] ?? 1))
                running = Task { try await self.leaseAndHandOver(bucket, lane: best, count: count, perSecond: perSecond, ensure: !state.ensured) }
                buckets[bucket]!.leasing = running
            }
            let outcome = try await running.value
            if case .granted = outcome { continue }
            guard case .refused(let readyIn) = outcome else { continue }
            let grant = max(Self.grantSeconds, interval)
            let sleep = max(0.002, readyIn - Self.lead(lane, grant: grant))
            let remaining = maximumWait - (clock.now - started)
            if .seconds(readyIn) > remaining + .seconds(Self.lead(lane, grant: grant)) { throw AppStoreBudgetRefusal(wait: .seconds(readyIn)) }
            try await Task.sleep(for: .seconds(min(sleep, 0.25)))
        }
    }

    /// Whether Apple's pause holds for `bucket` now (one primary-key read just before each call: a 429 one process
    /// received stops the others' next calls, not only their next lease).
    private func pausedNow(_ bucket: AppStoreBudgetBucket) async throws -> Bool {
        try await withDeadline(Self.databaseDeadline, "reading the pause of \(bucket)") { [client, logger] in
            let rows = try await client.query(
                """
                SELECT 1 FROM appstore_api_budget
                WHERE bundle_id = \(bucket.bundleId) AND environment = \(bucket.environment) AND endpoint_class = \(bucket.endpointClass)
                  AND paused_until > clock_timestamp()
                """, logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// `lease`, then its slots added to the bucket's and the bucket free for the next lease, in one actor turn.
    private func leaseAndHandOver(_ bucket: AppStoreBudgetBucket, lane: AppStoreAPILane, count: Int, perSecond: Double, ensure: Bool) async throws -> LeaseOutcome {
        defer { buckets[bucket]!.leasing = nil }
        let outcome = try await withDeadline(Self.databaseDeadline, "leasing slots of \(bucket)") {
            try await self.lease(bucket, lane: lane, count: count, perSecond: perSecond, ensure: ensure)
        }
        buckets[bucket]!.ensured = true
        if case .granted(let first, let count) = outcome {
            let base = clock.now + .seconds(first)
            buckets[bucket]!.slots += (0..<count).map { base + .seconds(Double($0) / perSecond) }
        }
        return outcome
    }

    /// Leases `count` slots for `lane`, or says how far ahead the schedule is when the lane may not lease yet.
    private func lease(_ bucket: AppStoreBudgetBucket, lane: AppStoreAPILane, count: Int, perSecond: Double, ensure: Bool) async throws -> LeaseOutcome {
        let grant = max(Self.grantSeconds, 1 / perSecond)
        let lead = Self.lead(lane, grant: grant)
        let span = Double(count) / perSecond
        if ensure {
            try await client.query(
                """
                INSERT INTO appstore_api_budget (bundle_id, environment, endpoint_class, rate) VALUES (\(bucket.bundleId), \(bucket.environment), \(bucket.endpointClass), \(perSecond))
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        let rows = try await client.query(
            """
            UPDATE appstore_api_budget b SET
                next_at = CASE WHEN s.ahead <= \(lead) THEN s.ready + make_interval(secs => \(span)) ELSE b.next_at END,
                granted = b.granted + CASE WHEN s.ahead <= \(lead) THEN \(count) ELSE 0 END,
                rate = \(perSecond), updated_at = s.now
            FROM (
                SELECT ready, now, extract(epoch FROM ready - now)::float8 AS ahead FROM (
                    SELECT greatest(next_at, now, coalesce(paused_until, now)) AS ready, now FROM (
                        SELECT next_at, paused_until, clock_timestamp() AS now FROM appstore_api_budget
                        WHERE bundle_id = \(bucket.bundleId) AND environment = \(bucket.environment) AND endpoint_class = \(bucket.endpointClass)
                        FOR UPDATE
                    ) locked
                ) r
            ) s
            WHERE b.bundle_id = \(bucket.bundleId) AND b.environment = \(bucket.environment) AND b.endpoint_class = \(bucket.endpointClass)
            RETURNING s.ahead
            """, logger: logger)
        var ahead: Double?
        for try await row in rows.decode(Double.self) { ahead = row }
        guard let ahead else { throw SharedBudgetError(reason: "the budget row of \(bucket) vanished while leasing") }
        try await reportQueues(bucket)
        if ahead <= lead {
            Counter(label: "appstore_api_budget_granted_total", dimensions: [("class", bucket.endpointClass)]).increment(by: count)
            return .granted(firstSlotIn: ahead, count: count)
        }
        return .refused(readyIn: ahead)
    }

    /// At most once a second per bucket: how many calls of each lane wait here and since when (what `pipelinectl
    /// appstore budget` shows as queue age by lane).
    private func reportQueues(_ bucket: AppStoreBudgetBucket) async throws {
        let now = clock.now
        guard let state = buckets[bucket], state.lastReport.map({ now - $0 >= .seconds(1) }) ?? true else { return }
        buckets[bucket]!.lastReport = now
        var lanes: [String] = [], waiting: [Int] = [], ages: [Double] = []
        for lane in AppStoreAPILane.allCases {
            let oldest = state.oldestWait[lane]?.values.min().map { now - $0 } ?? .zero
            let age = Double(oldest.components.seconds) + Double(oldest.components.attoseconds) / 1e18
            Gauge(label: "appstore_api_budget_queue_age_seconds", dimensions: [("class", bucket.endpointClass), ("lane", lane.rawValue)]).record(age)
            lanes.append(lane.rawValue)
            waiting.append(state.waiting[lane] ?? 0)
            ages.append(age)
        }
        // Every lane in one statement (one round trip inside the lease).
        try await client.query(
            """
            INSERT INTO appstore_api_budget_queues (bundle_id, environment, endpoint_class, lane, holder, waiting, oldest_wait_seconds, reported_at)
            SELECT \(bucket.bundleId), \(bucket.environment), \(bucket.endpointClass), l.lane, \(holder), l.waiting, l.age, clock_timestamp()
            FROM unnest(\(lanes)::text[], \(waiting)::integer[], \(ages)::float8[]) AS l(lane, waiting, age)
            ON CONFLICT (bundle_id, environment, endpoint_class, lane, holder) DO UPDATE
            SET waiting = excluded.waiting, oldest_wait_seconds = excluded.oldest_wait_seconds, reported_at = excluded.reported_at
            """, logger: logger)
    }

    public func pause(_ bucket: AppStoreBudgetBucket, until: Date, reason: String) async {
        buckets[bucket, default: BucketState()].slots.removeAll()
        Counter(label: "appstore_api_budget_pauses_total", dimensions: [("class", bucket.endpointClass)]).increment()
        do {
            try await client.query(
                """
                INSERT INTO appstore_api_budget (bundle_id, environment, endpoint_class, rate, next_at, paused_until, pause_reason, pauses)
                VALUES (\(bucket.bundleId), \(bucket.environment), \(bucket.endpointClass), 1, \(until), \(until), \(reason), 1)
                ON CONFLICT (bundle_id, environment, endpoint_class) DO UPDATE SET
                    paused_until = greatest(appstore_api_budget.paused_until, excluded.paused_until),
                    next_at = greatest(appstore_api_budget.next_at, excluded.next_at),
                    pause_reason = excluded.pause_reason, pauses = appstore_api_budget.pauses + 1, updated_at = clock_timestamp()
                """, logger: logger)
        } catch {
            // The pause still holds in this process (its slots are gone); the others learn of it by their own 429.
            logger.warning("could not record Apple's pause in the shared budget", metadata: ["bucket": "\(bucket)", "error": "\(String(reflecting: error))"])
        }
        logger.notice("Apple asked us to slow down: the budget is paused", metadata: ["bucket": "\(bucket)", "until": "\(until)", "answer": "\(reason)"])
    }

    static func record(_ bucket: AppStoreBudgetBucket, lane: AppStoreAPILane, waited: Duration) {
        Timer(label: "appstore_api_budget_wait_seconds", dimensions: [("class", bucket.endpointClass), ("lane", lane.rawValue)], preferredDisplayUnit: .seconds)
            .recordNanoseconds(waited.components.seconds * 1_000_000_000 + waited.components.attoseconds / 1_000_000_000)
        Counter(label: "appstore_api_budget_calls_total", dimensions: [("class", bucket.endpointClass), ("lane", lane.rawValue)]).increment()
    }
}

/// The shared budget could not do what it must (its row is gone: the schema was not migrated).
public struct SharedBudgetError: Error, Sendable, CustomStringConvertible {
    public var reason: String
    public var description: String { reason }
}
