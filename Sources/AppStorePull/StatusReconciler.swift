import AppStoreNotifications
import AppStoreServerAPI
import AppStoreServerAPIModels
import EntitlementStore
import Foundation
import Logging
import NotificationRecords

/// What a reconcile or an import did.
public struct PullSummary: Sendable {
    public var runId: Int64?
    public var resumed = false
    public var ids = 0
    public var processed = 0
    public var snapshots = 0
    public var transactions = 0
    /// Ids Apple does not know (4040010 and friends), with Apple's code: reported, not fatal.
    public var unknownIds: [(id: String, code: Int64?)] = []
    /// Statuses items with no signed transaction or status, left out.
    public var incompleteItems = 0
    /// Rows whose status, expiry or product differ after the snapshots were applied.
    public var changes: [(originalTransactionId: String, before: EntitlementSummary?, after: EntitlementSummary?)] = []
    /// Snapshot uuids the workers had not stored when the wait ended (0 when all were applied).
    public var notApplied = 0
    /// Records about an erased customer, from before the erasure, held back (never produced; docs/privacy.md).
    public var erasedHeldBack = 0
    /// Ids done per second in this run so far, and the time left at that pace (nil until the first id is done):
    /// the run takes what the App Store budget leaves, so its pace is the honest measure of what remains.
    public var idsPerSecond: Double?
    public var secondsLeft: Double?

    /// Adds what one id's work found (the ids' counts and lists; not the position).
    mutating func merge(_ other: PullSummary) {
        snapshots += other.snapshots
        transactions += other.transactions
        unknownIds += other.unknownIds
        incompleteItems += other.incompleteItems
        erasedHeldBack += other.erasedHeldBack
    }

    public init() {}
}

/// Apple's errors that mean "no such customer" for an id: reported per id, the run goes on.
let unknownIdCodes: Set<Int64> = [4_040_010, 4_040_005, 4_000_006, 4_000_008, 4_040_001]

/// `pipelinectl reconcile`: Get All Subscription Statuses for each id, each subscription in it produced as a
/// status snapshot; the workers verify and apply it through the state machine (Apple's status is the truth as of
/// the JWSs' signedDate; a later notification still wins). Resumable by position in the id list.
public struct StatusReconciler: Sendable {
    public let api: AppStoreServerAPIClient
    public let producer: PulledRecordProducer
    public let store: EntitlementStore
    public let logger: Logger

    /// Ids worked on at once: enough that the App Store budget, not the round trip, bounds a run.
    public var concurrency: Int

    public init(api: AppStoreServerAPIClient, producer: PulledRecordProducer, store: EntitlementStore, logger: Logger, concurrency: Int = 8) {
        self.api = api
        self.producer = producer
        self.store = store
        self.logger = logger
        self.concurrency = max(1, concurrency)
    }

    public func run(
        bundleId: String, environment: Environment, ids: [String], argumentsKey: String, restart: Bool, wait: Duration,
        progress: @Sendable (PullSummary) -> Void = { _ in }
    ) async throws -> PullSummary {
        try await runOverIds(
            command: "reconcile", bundleId: bundleId, environment: environment, ids: ids, argumentsKey: argumentsKey, restart: restart, wait: wait, progress: progress
        ) { id, summary, before, produced in
            try await reconcile(id, bundleId: bundleId, environment: environment, summary: &summary, before: &before, produced: &produced)
        }
    }

    /// The frame both pull commands share: a checkpointed walk over `ids` with `concurrency` ids in flight (`pull_runs`
    /// holds the end of the prefix of ids all done, saved as it grows: a resumed run repeats at most the ids that
    /// were in flight, harmlessly), then the wait for the workers to store the snapshots produced, then the
    /// before → after comparison.
    func runOverIds(
        command: String, bundleId: String, environment: Environment, ids: [String], argumentsKey: String, restart: Bool, wait: Duration,
        progress: @Sendable (PullSummary) -> Void,
        each: @escaping @Sendable (String, inout PullSummary, inout [String: EntitlementSummary?], inout [String: String]) async throws -> Void
    ) async throws -> PullSummary {
        var summary = PullSummary()
        summary.ids = ids.count
        let checkpoint = try await store.openPullRun(command: command, argumentsKey: argumentsKey, total: ids.count, restart: restart)
        summary.runId = checkpoint.id
        summary.resumed = checkpoint.resumed
        summary.processed = checkpoint.position
        var before: [String: EntitlementSummary?] = [:]
        var produced: [String: String] = [:]  // snapshot uuid -> originalTransactionId
        struct Outcome: Sendable {
            var summary = PullSummary()
            var before: [String: EntitlementSummary?] = [:]
            var produced: [String: String] = [:]
        }
        let started = ContinuousClock.now
        do {
            try await withThrowingTaskGroup(of: (Int, Outcome).self) { group in
                var next = checkpoint.position
                var done: Set<Int> = []
                var prefix = checkpoint.position
                while next < ids.count, next - prefix < concurrency {
                    let (index, id) = (next, ids[next])
                    group.addTask {
                        var outcome = Outcome()
                        try await each(id, &outcome.summary, &outcome.before, &outcome.produced)
                        return (index, outcome)
                    }
                    next += 1
                }
                while let (index, outcome) = try await group.next() {
                    summary.merge(outcome.summary)
                    for (key, row) in outcome.before where before[key] == nil { before[key] = row }
                    produced.merge(outcome.produced) { first, _ in first }
                    done.insert(index)
                    let old = prefix
                    while done.remove(prefix) != nil { prefix += 1 }
                    if prefix > old {
                        summary.processed = prefix
                        try await store.savePullRun(id: checkpoint.id, position: prefix)
                        let elapsed = ContinuousClock.now - started
                        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                        if seconds > 0 {
                            summary.idsPerSecond = Double(prefix - checkpoint.position) / seconds
                            summary.secondsLeft = summary.idsPerSecond.flatMap { $0 > 0 ? Double(ids.count - prefix) / $0 : nil }
                        }
                        progress(summary)
                    }
                    while next < ids.count, next - prefix < concurrency {
                        let (index, id) = (next, ids[next])
                        group.addTask {
                            var outcome = Outcome()
                            try await each(id, &outcome.summary, &outcome.before, &outcome.produced)
                            return (index, outcome)
                        }
                        next += 1
                    }
                }
            }
        } catch {
            try? await store.finishPullRun(id: checkpoint.id, error: String(describing: error))
            throw error
        }
        try await store.finishPullRun(id: checkpoint.id, error: nil)
        try await awaitApplied(produced, wait: wait, summary: &summary)
        try await diff(before, environment: environment, bundleId: bundleId, summary: &summary)
        return summary
    }

    /// One id: its statuses, each subscription in them produced as a snapshot (after noting its row as it was).
    public func reconcile(
        _ id: String, bundleId: String, environment: Environment, summary: inout PullSummary, before: inout [String: EntitlementSummary?], produced: inout [String: String]
    ) async throws {
        let response: StatusResponse
        do {
            response = try await api.subscriptionStatuses(bundleId: bundleId, transactionId: id)
        } catch let error as AppStoreServerAPIError where unknownIdCodes.contains(error.errorCode ?? 0) {
            summary.unknownIds.append((id, error.errorCode))
            return
        }
        let documents = response.snapshots
        summary.incompleteItems += response.data.reduce(0) { $0 + $1.lastTransactions.count } - documents.count
        let ids = documents.map(\.originalTransactionId)
        let current = try await store.entitlementSummaries(environment: environment.rawValue, bundleId: bundleId, originalTransactionIds: ids)
        for id in ids where before[id] == nil { before[id] = .some(current[id]) }
        let sent = try await producer.produce(documents.map { (PulledRecordKind.statusSnapshot, $0.originalTransactionId, Array($0.json.serialized.utf8), "statuses") })
        for (document, wasSent) in zip(documents, sent) where wasSent { produced[document.notificationUUID] = document.originalTransactionId }
        summary.erasedHeldBack += sent.count { !$0 }
        summary.snapshots += sent.count { $0 }
    }

    /// Waits (up to `wait`) until the workers stored every snapshot produced.
    func awaitApplied(_ produced: [String: String], wait: Duration, summary: inout PullSummary) async throws {
        let deadline = ContinuousClock.now + wait
        var missing = Set(produced.keys)
        while !missing.isEmpty {
            missing.subtract(try await store.notificationsInLedger(Array(missing)))
            guard !missing.isEmpty, ContinuousClock.now < deadline else { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        summary.notApplied = missing.count
    }

    func diff(_ before: [String: EntitlementSummary?], environment: Environment, bundleId: String, summary: inout PullSummary) async throws {
        let after = try await store.entitlementSummaries(environment: environment.rawValue, bundleId: bundleId, originalTransactionIds: Array(before.keys))
        for id in before.keys.sorted() where before[id]! != after[id] {
            summary.changes.append((id, before[id]!, after[id]))
        }
    }
}

/// `pipelinectl import`: every page of Get Transaction History v2 for each id, each signed transaction produced as
/// its own record kind, then a status snapshot; each customer's last `revision` is stored, so the next import of
/// the same ids asks Apple only for what changed.
public struct HistoryImporter: Sendable {
    public let reconciler: StatusReconciler

    public init(reconciler: StatusReconciler) {
        self.reconciler = reconciler
    }

    public func run(
        bundleId: String, environment: Environment, ids: [String], argumentsKey: String, restart: Bool, wait: Duration,
        progress: @Sendable (PullSummary) -> Void = { _ in }
    ) async throws -> PullSummary {
        try await reconciler.runOverIds(
            command: "import", bundleId: bundleId, environment: environment, ids: ids, argumentsKey: argumentsKey, restart: restart, wait: wait, progress: progress
        ) { id, summary, before, produced in
            if try await importHistory(id, bundleId: bundleId, environment: environment, summary: &summary) {
                try await reconciler.reconcile(id, bundleId: bundleId, environment: environment, summary: &summary, before: &before, produced: &produced)
            }
        }
    }

    /// Pages from the stored revision on; the revision is saved after each page's records were acknowledged.
    /// False when Apple does not know the id.
    func importHistory(_ id: String, bundleId: String, environment: Environment, summary: inout PullSummary) async throws -> Bool {
        let store = reconciler.store
        var revision = try await store.historyRevision(environment: environment.rawValue, bundleId: bundleId, transactionId: id)
        while true {
            let page: HistoryResponse
            do {
                page = try await reconciler.api.transactionHistory(bundleId: bundleId, transactionId: id, revision: revision)
            } catch let error as AppStoreServerAPIError where unknownIdCodes.contains(error.errorCode ?? 0) {
                summary.unknownIds.append((id, error.errorCode))
                return false
            }
            let sent = try await reconciler.producer.produce(page.signedTransactions.map { signed in
                let key = UnverifiedPeek.payload(of: signed)?["originalTransactionId"]?.stringValue
                return (PulledRecordKind.historyTransaction, key, Array(signed.utf8), "transaction-history")
            })
            summary.transactions += sent.count { $0 }
            summary.erasedHeldBack += sent.count { !$0 }
            // The revision names the customer's id: kept only when something of theirs was sent (an erased
            // customer's import leaves no row behind; the next import asks Apple from the start, harmlessly).
            if let next = page.revision, sent.contains(true) {
                try await store.saveHistoryRevision(environment: environment.rawValue, bundleId: bundleId, transactionId: id, revision: next, added: page.signedTransactions.count)
                revision = next
            }
            guard page.hasMore else { return true }
        }
    }
}
