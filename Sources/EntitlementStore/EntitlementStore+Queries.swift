import AppStoreNotifications
import Foundation
import PostgresNIO

/// Which entitlements to look up: one subscription, or every one bought by an app user.
public enum EntitlementLookup: Sendable, Hashable {
    case originalTransactionId(String)
    /// The app's own user id (`appAccountToken`), as the app set it at purchase.
    case appAccountToken(String)
    /// Every entitlement, most recently signed first, at most `limit` (an overview for operators and the demo).
    case all(limit: Int)
}

/// One entitlement row as `entitlements_now` shows it: the state, and whether it grants access now.
public struct EntitlementRecord: Sendable {
    public var state: EntitlementState
    /// `entitlements_now.is_active`: status grants access and the expiry (or grace period) is still ahead.
    public var isActive: Bool
    public var updatedAt: Date
}

/// One archived notification, newest first in a history.
public struct NotificationHistoryEntry: Sendable {
    public var notificationUUID: String
    public var notificationType: String
    public var subtype: String?
    public var signedDate: Date
    public var storedAt: Date
}

extension EntitlementStore {
    /// The current entitlements matching `lookup` (all environments and apps).
    public func entitlements(_ lookup: EntitlementLookup) async throws -> [EntitlementRecord] {
        let query: PostgresQuery
        switch lookup {
        case .originalTransactionId(let id):
            query = "SELECT state::text, is_active, updated_at FROM entitlements_now WHERE original_transaction_id = \(id) ORDER BY environment, bundle_id"
        case .appAccountToken(let token):
            query = "SELECT state::text, is_active, updated_at FROM entitlements_now WHERE lower(app_account_token) = lower(\(token)) ORDER BY last_signed_date DESC"
        case .all(let limit):
            query = "SELECT state::text, is_active, updated_at FROM entitlements_now ORDER BY last_signed_date DESC, original_transaction_id LIMIT \(limit)"
        }
        var records: [EntitlementRecord] = []
        for try await (state, isActive, updatedAt) in try await client.query(query, logger: logger).decode((String, Bool, Date).self) {
            records.append(EntitlementRecord(state: try JSONDecoder().decode(EntitlementState.self, from: Data(state.utf8)), isActive: isActive, updatedAt: updatedAt))
        }
        return records
    }

    /// The newest `limit` notifications archived for a subscription.
    public func history(originalTransactionId: String, limit: Int = 10) async throws -> [NotificationHistoryEntry] {
        var entries: [NotificationHistoryEntry] = []
        let rows = try await client.query(
            """
            SELECT notification_uuid, notification_type, subtype, signed_date, stored_at FROM notifications
            WHERE original_transaction_id = \(originalTransactionId) ORDER BY signed_date DESC LIMIT \(limit)
            """,
            logger: logger)
        for try await (uuid, type, subtype, signedDate, storedAt) in rows.decode((String, String, String?, Date, Date).self) {
            entries.append(NotificationHistoryEntry(notificationUUID: uuid, notificationType: type, subtype: subtype, signedDate: signedDate, storedAt: storedAt))
        }
        return entries
    }
}
