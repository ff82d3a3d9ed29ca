import Foundation

/// Who a call to Apple is for, in the order the budget serves them (docs/appstore-budget.md). A lane's calls take
/// what the lanes above leave: the purchase path never waits behind a sweep for more than a grant or two of it.
public enum AppStoreAPILane: String, Sendable, CaseIterable, Comparable {
    /// A backend waiting on an answer: the customer API's purchase path and lookups.
    case purchase
    /// A worker healing a row that contradicts Apple.
    case healing
    /// An operator's action (the console, `pipelinectl` one-off commands).
    case console
    /// `pipelinectl backfill` and its catch-up loop.
    case backfill
    /// Reconcile and import sweeps over many subscriptions.
    case sweep

    /// 0 is the most urgent.
    public var priority: Int { Self.allCases.firstIndex(of: self)! }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.priority < rhs.priority }

    /// The lane of the calls made inside `withValue` (a command or a handler sets it around its work); nil means the
    /// client's own default.
    @TaskLocal public static var current: AppStoreAPILane?
}

/// One budget: Apple limits each app, per environment, per endpoint class.
public struct AppStoreBudgetBucket: Hashable, Sendable, CustomStringConvertible {
    public var bundleId: String
    public var environment: String
    /// `AppStoreServerAPIClient.EndpointFamily.rawValue` (a test notification's POST and GET are limited apart).
    public var endpointClass: String

    public init(bundleId: String, environment: String, endpointClass: String) {
        self.bundleId = bundleId
        self.environment = environment
        self.endpointClass = endpointClass
    }

    public var description: String { "\(bundleId) \(environment) \(endpointClass)" }
}

/// Where a client takes its turn before each call to Apple, and where Apple's "slow down" is told to every process.
/// `LocalRequestBudget` keeps the turns in this process; the shared budget (module AppStoreBudget) keeps them in
/// PostgreSQL, so any number of processes together stay within the rate.
public protocol AppStoreRequestBudget: Sendable {
    /// Returns when a call of `bucket` may leave at `perSecond`; throws `AppStoreBudgetRefusal` at once when the turn
    /// is more than `maximumWait` away (the call then takes no turn).
    func acquire(_ bucket: AppStoreBudgetBucket, lane: AppStoreAPILane, perSecond: Double, maximumWait: Duration) async throws
    /// Apple answered 429 or 503 with `Retry-After`: no call of `bucket` leaves, from any process, before `until`.
    func pause(_ bucket: AppStoreBudgetBucket, until: Date, reason: String) async
}

/// A turn that would come later than the caller may wait.
public struct AppStoreBudgetRefusal: Error, Sendable {
    /// How long until a call of the bucket could leave.
    public var wait: Duration

    public init(wait: Duration) {
        self.wait = wait
    }
}

/// The budget of one process: a token bucket per bucket (`RequestRateLimiter`) and Apple's pauses, held in memory.
/// What a process without a database uses (tests of the client, the fake's tools); every service and `pipelinectl`
/// uses the shared budget.
public actor LocalRequestBudget: AppStoreRequestBudget {
    private let limiter = RequestRateLimiter()
    private var pauses: [AppStoreBudgetBucket: Date] = [:]

    public init() {}

    public func acquire(_ bucket: AppStoreBudgetBucket, lane: AppStoreAPILane, perSecond: Double, maximumWait: Duration) async throws {
        if let until = pauses[bucket] {
            let seconds = until.timeIntervalSinceNow
            if seconds > 0 {
                let wait = Duration.milliseconds(Int64((seconds * 1000).rounded(.up)))
                if wait > maximumWait { throw AppStoreBudgetRefusal(wait: wait) }
                try await Task.sleep(for: wait)
            }
        }
        do {
            try await limiter.acquire(bucket.description, perSecond: perSecond, maximumWait: maximumWait)
        } catch let refusal as RequestRateLimiter.Refusal {
            throw AppStoreBudgetRefusal(wait: refusal.wait)
        }
    }

    public func pause(_ bucket: AppStoreBudgetBucket, until: Date, reason: String) async {
        pauses[bucket] = max(pauses[bucket] ?? .distantPast, until)
    }
}
