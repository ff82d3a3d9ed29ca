import AppStoreNotifications
import AppStoreServerAPI
import AppStoreServerAPIModels
import EntitlementStore
import Foundation
import Logging

/// Apple → ingest → Kafka → worker → PostgreSQL in one call: ask Apple for a TEST notification, poll its status
/// until Apple says how sending went, then wait for its notificationUUID in the ledger.
public struct TestNotificationCheck: Sendable {
    public enum Outcome: Sendable, Equatable {
        /// Stored: every hop worked.
        case stored
        /// Apple could not deliver it to ingest; the last attempt's result (e.g. `TIMED_OUT`).
        case sendFailed(SendAttemptResult)
        /// Apple delivered it (ingest answered 200) but no worker stored it in time.
        case sentButNotStored
        /// Apple did not report a send attempt in time.
        case notSent
    }

    public struct Report: Sendable {
        public var outcome: Outcome
        public var testNotificationToken: String?
        public var notificationUUID: String?
        public var requestedAt: Int64
        /// When Apple's status endpoint first answered with the notification.
        public var statusAt: Int64?
        public var sendAttempts: [SendAttemptItem] = []
        /// Ingest's `received-at`, and the worker's commit.
        public var receivedAt: Int64?
        public var storedAt: Int64?
        public var finishedAt: Int64
    }

    public let api: AppStoreServerAPIClient
    public let store: EntitlementStore
    public let logger: Logger

    public init(api: AppStoreServerAPIClient, store: EntitlementStore, logger: Logger) {
        self.api = api
        self.store = store
        self.logger = logger
    }

    public func run(bundleId: String, timeout: Duration, progress: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        let deadline = ContinuousClock.now + timeout
        let now = { Int64(Date().timeIntervalSince1970 * 1000) }
        var report = Report(outcome: .notSent, requestedAt: now(), finishedAt: 0)
        let token = try await api.requestTestNotification(bundleId: bundleId).testNotificationToken
        report.testNotificationToken = token
        progress("Apple accepted the request (token \(UntrustedText.quoted(token, limit: 100)))")

        // Apple answers 4040008 until the notification was sent: poll with backoff, within the deadline.
        var wait = Duration.milliseconds(500)
        var status: CheckTestNotificationResponse?
        while ContinuousClock.now < deadline {
            do {
                let answer = try await api.testNotificationStatus(bundleId: bundleId, testNotificationToken: token)
                if answer.signedPayload != nil, !answer.sendAttempts.isEmpty {
                    status = answer
                    break
                }
            } catch let error as AppStoreServerAPIError where error.errorCode == AppleErrorCode.testNotificationNotFound {
                // Not ready yet.
            }
            try await Task.sleep(for: min(wait, max(.zero, deadline - ContinuousClock.now)))
            wait = min(wait * 2, .seconds(10))
        }
        guard let status, let signedPayload = status.signedPayload else {
            report.finishedAt = now()
            return report
        }
        report.statusAt = now()
        report.sendAttempts = status.sendAttempts
        report.notificationUUID = UnverifiedPeek.payload(of: signedPayload)?["notificationUUID"]?.stringValue
        progress("Apple sent it: \(status.sendAttempts.map { $0.sendAttemptResult?.rawValue ?? "?" }.joined(separator: ", "))")
        if let last = status.lastSendAttemptResult, last != .success {
            report.outcome = .sendFailed(last)
            report.finishedAt = now()
            return report
        }
        report.outcome = .sentButNotStored
        if let uuid = report.notificationUUID {
            while ContinuousClock.now < deadline {
                if let times = try await store.storedTimes(notificationUUID: uuid) {
                    report.receivedAt = times.receivedAt
                    report.storedAt = times.storedAt
                    report.outcome = .stored
                    break
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        report.finishedAt = now()
        return report
    }
}
