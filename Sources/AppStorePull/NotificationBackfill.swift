import AppStoreNotifications
import AppStoreServerAPI
import AppStoreServerAPIModels
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import NotificationRecords
import ServiceContextModule

/// What one backfill asks Apple for.
public struct BackfillRequest: Sendable {
    public var bundleId: String
    public var environment: Environment
    /// The window, in milliseconds since 1970 (Apple's `startDate`/`endDate`).
    public var startDate: Int64
    public var endDate: Int64
    public var onlyFailures = false
    public var notificationType: String?
    public var notificationSubtype: String?
    public var transactionId: String?
    /// The arguments as the operator gave them (relative times unresolved): rerunning the same command finds
    /// the unfinished run by them and resumes it, with the window that run resolved.
    public var argumentsKey: String
    /// The keyed digest (`KeyedDigest`, under the deployment's erasure key or Apple's API key) that stands for the
    /// arguments and the transaction id when they name a customer. Without one, a per-process random key: never a
    /// plain SHA-256, which a list of transaction ids reverses.
    public var identifierDigest: KeyedDigest?

    public init(bundleId: String, environment: Environment, startDate: Int64, endDate: Int64, argumentsKey: String) {
        self.bundleId = bundleId
        self.environment = environment
        self.startDate = startDate
        self.endDate = endDate
        self.argumentsKey = argumentsKey
    }

    /// How far back Apple keeps notification history: 180 days in production, 30 in sandbox.
    public static func retentionDays(_ environment: Environment) -> Int { environment == .production ? 180 : 30 }

    /// Refuses what Apple would refuse, before any call, with the rule's text.
    public func validate(now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) throws(BackfillError) {
        guard environment == .production || environment == .sandbox else {
            throw BackfillError(reason: "--environment must be Production or Sandbox: Apple keeps no notification history for \(environment.rawValue)")
        }
        guard startDate < endDate else { throw BackfillError(reason: "the window is empty: --since must be before --until") }
        let days = Self.retentionDays(environment)
        let oldest = now - Int64(days) * 86_400_000
        guard startDate >= oldest else {
            throw BackfillError(
                reason: "--since \(Timestamp(millisecondsSince1970: startDate)) is older than Apple keeps notification history: \(days) days in \(environment.rawValue), so the earliest start now is \(Timestamp(millisecondsSince1970: oldest))")
        }
        guard notificationType == nil || transactionId == nil else {
            throw BackfillError(reason: "--type and --transaction-id cannot be combined (Apple answers MultipleFiltersSuppliedError): run one backfill for each")
        }
        guard notificationSubtype == nil || notificationType != nil else { throw BackfillError(reason: "a subtype needs its type: --type TYPE/SUBTYPE") }
    }

    var historyRequest: NotificationHistoryRequest {
        NotificationHistoryRequest(
            startDate: startDate, endDate: endDate, notificationType: notificationType, notificationSubtype: notificationSubtype, transactionId: transactionId,
            onlyFailures: onlyFailures ? true : nil)
    }

    /// The run's arguments as stored with its checkpoint. A customer's transaction id is kept only as its SHA-256
    /// (in the key too: `storedArgumentsKey`), so an erased customer's id never lingers in `backfill_runs`.
    var argumentsJSON: JSONObject {
        var object = JSONObject([
            "bundleId": .string(bundleId), "environment": .string(environment.rawValue), "startDate": .number(JSONNumber(startDate)),
            "endDate": .number(JSONNumber(endDate)), "onlyFailures": .bool(onlyFailures), "given": .string(storedArgumentsKey),
        ])
        if let notificationType { object["notificationType"] = .string(notificationType) }
        if let notificationSubtype { object["notificationSubtype"] = .string(notificationSubtype) }
        if let transactionId { object["transactionIdDigest"] = .string(digest(transactionId)) }
        return object
    }

    /// The key a run is found again by: the arguments as given, or their keyed digest when they name a customer's transaction.
    var storedArgumentsKey: String { transactionId == nil ? argumentsKey : digest(argumentsKey) }

    func digest(_ text: String) -> String { (identifierDigest ?? Self.processDigest).hex(text) }

    /// The fallback: keyed, but only for this process's life (a run without a deployment key is not resumed by another).
    static let processDigest = KeyedDigest(secret: (0..<32).map { _ in UInt8.random(in: 0...255) })
}

/// A backfill that cannot run as asked.
public struct BackfillError: Error, Sendable, CustomStringConvertible {
    public var reason: String
    public init(reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// Where a backfill is, for progress lines and the summary.
public struct BackfillSummary: Sendable, Hashable {
    public var runId: Int64?
    public var resumed = false
    public var completed = false
    /// Pages, notifications fetched, produced, already in the ledger and new, this run's and (when resumed) the
    /// runs' before it: what the checkpoint keeps.
    public var counts = BackfillCounts()
    /// Send-attempt results this version does not know, kept raw in the record header (counted, not refused).
    public var unknownSendAttemptResults = 0
    /// Notifications about an erased customer, from before the erasure: not produced (docs/privacy.md).
    public var erasedHeldBack = 0
    /// Where in the window the last page reached (its newest send attempt), when known.
    public var reachedDate: Int64?
    public var window: ClosedRange<Int64>?
}

/// Pulls Get Notification History page by page and produces each `signedPayload` to the notifications topic as
/// ingest does (same key rule, acks=all, idempotent), so the workers verify, dedupe and store it like any other.
///
/// A page counts only once all its records were acknowledged; then its successor's token is checkpointed in
/// PostgreSQL (`backfill_runs`). Killed anywhere, the same command resumes at the first page not checkpointed:
/// at worst that page is produced twice, which the ledger makes harmless.
public struct NotificationBackfill: Sendable {
    public let api: AppStoreServerAPIClient
    /// Nil for a dry run: pages are fetched and counted, nothing is produced or checkpointed.
    public let producer: KafkaProducer?
    public let store: EntitlementStore
    public let topic: String
    public let logger: Logger

    public init(api: AppStoreServerAPIClient, producer: KafkaProducer?, store: EntitlementStore, topic: String, logger: Logger) {
        self.api = api
        self.producer = producer
        self.store = store
        self.topic = topic
        self.logger = logger
    }

    public func run(_ request: BackfillRequest, restart: Bool = false, progress: @Sendable (BackfillSummary) -> Void = { _ in }) async throws -> BackfillSummary {
        try request.validate()
        var summary = BackfillSummary()
        var checkpoint: BackfillCheckpoint?
        var history = request.historyRequest
        var token: String?
        if producer != nil {
            let opened = try await store.openBackfillRun(
                argumentsKey: request.storedArgumentsKey, arguments: request.argumentsJSON.serialized, bundleId: request.bundleId,
                environment: request.environment.rawValue, startDate: request.startDate, endDate: request.endDate, restart: restart)
            checkpoint = opened
            // A resumed run keeps the window it resolved when it began.
            history.startDate = opened.startDate
            history.endDate = opened.endDate
            token = opened.paginationToken
            summary.runId = opened.id
            summary.resumed = opened.resumed
            summary.counts = opened.counts
        }
        summary.window = history.startDate...history.endDate
        progress(summary)
        do {
            while true {
                let page: NotificationHistoryResponse
                do {
                    page = try await api.notificationHistory(bundleId: request.bundleId, request: history, paginationToken: token)
                } catch let error as AppStoreServerAPIError
                    where token != nil && summary.resumed && [AppleErrorCode.paginationTokenExpired, AppleErrorCode.invalidPaginationToken].contains(error.errorCode ?? 0)
                {
                    // Apple's tokens do not live for ever: a run resumed long after it stopped starts its window over
                    // (what it produces again is deduplicated by the workers).
                    logger.warning("the checkpointed page token was refused; starting the window over", metadata: ["error": "\(error)"])
                    token = nil
                    summary.resumed = false
                    continue
                }
                try await take(page, request: request, summary: &summary)
                token = page.paginationToken
                summary.counts.pages += 1
                if var current = checkpoint {
                    current.paginationToken = page.hasMore ? page.paginationToken : nil
                    current.counts = summary.counts
                    try await store.saveBackfillCheckpoint(current)
                    checkpoint = current
                }
                progress(summary)
                guard page.hasMore else { break }
            }
        } catch {
            if let checkpoint { try? await store.finishBackfillRun(id: checkpoint.id, outcome: "failed", error: String(describing: error)) }
            throw error
        }
        if let checkpoint { try await store.finishBackfillRun(id: checkpoint.id, outcome: "completed") }
        summary.completed = true
        return summary
    }

    /// Produces every notification of `page` and waits for all acknowledgements; throws if any failed.
    func take(_ page: NotificationHistoryResponse, request: BackfillRequest, summary: inout BackfillSummary) async throws {
        let items = page.notificationHistory
        summary.counts.fetched += items.count
        let uuids = items.map { UnverifiedPeek.payload(of: $0.signedPayload)?["notificationUUID"]?.stringValue }
        let stored = try await store.notificationsInLedger(uuids.compactMap { $0 })
        for uuid in uuids {
            if let uuid, stored.contains(uuid) { summary.counts.alreadyStored += 1 } else { summary.counts.newNotifications += 1 }
        }
        for item in items {
            if let result = item.lastSendAttemptResult, !result.isKnown {
                summary.unknownSendAttemptResults += 1
                logger.notice("kept a send-attempt result this version does not know", metadata: ["value": "\(UntrustedText.quoted(result.rawValue))"])
            }
            if let newest = item.sendAttempts.compactMap(\.attemptDate).max() { summary.reachedDate = max(summary.reachedDate ?? newest, newest) }
        }
        guard let producer else { return }
        // An erased customer's notifications from before the erasure are never produced again: the topic would keep
        // them for its retention and a replay would read them (the workers would suppress them, but too late for
        // the promise that the topic holds nothing new about them).
        let erased = try await store.erased(items.map { ErasureClaim.ofNotification($0.signedPayload) })
        summary.erasedHeldBack += erased.count
        let now = NotificationRecord.now()
        let records = items.enumerated().filter { !erased.contains($0.offset) }.map(\.element).map { item in
            NotificationRecord.fromHistory(
                signedPayload: item.signedPayload, topic: topic, sendAttemptResult: item.lastSendAttemptResult?.rawValue, now: now,
                context: ServiceContext.current)
        }
        // All of the page in flight at once, every acknowledgement awaited: the page counts only when all arrived.
        try await producer.sendAllAndAwait(records)
        summary.counts.produced += records.count
    }
}
