/// What a subscriber is entitled to right now, for one subscription: the row an app backend reads.
///
/// Keyed by (environment, bundleId, originalTransactionId): `originalTransactionId` is stable across renewals,
/// upgrades and downgrades within a subscription group. Every field comes from verified App Store data.
public struct EntitlementState: Sendable, Hashable, Codable {
    public enum Status: String, Sendable, Hashable, Codable, CaseIterable {
        /// Paid up (or in a free trial/offer) and renewing or not yet expired.
        case active
        /// A renewal failed but Apple's billing grace period still grants access.
        case gracePeriod
        /// A renewal failed and Apple keeps retrying; no access.
        case billingRetry
        /// Ended: cancelled, not renewed, or retries exhausted.
        case expired
        /// Refunded by Apple.
        case refunded
        /// Access revoked (family sharing stopped, or Apple's `REVOKE`).
        case revoked
        /// Superseded: a switch to or from a subscription bundle continued this subscription under a new
        /// `originalTransactionId` (`supersededBy`); the new row grants access, this one never again.
        case migrated

        /// Whether this status grants access (before the expiry backstop).
        public var grantsAccess: Bool { self == .active || self == .gracePeriod }
    }

    public var environment: String
    public var bundleId: String
    public var originalTransactionId: String

    public var productId: String?
    public var subscriptionGroupIdentifier: String?
    public var status: Status
    public var expiresAt: Timestamp?
    public var gracePeriodExpiresAt: Timestamp?
    /// 1 on, 0 off (Apple's autoRenewStatus).
    public var autoRenewStatus: Int32?
    /// The product the next renewal will be: differs from `productId` while a downgrade is pending.
    public var autoRenewProductId: String?
    /// When the current billing problem began (first DID_FAIL_TO_RENEW), nil when billing is fine.
    public var billingIssueSince: Timestamp?
    public var revocationDate: Timestamp?
    public var revocationReason: Int32?
    public var revocationType: String?
    /// PURCHASED or FAMILY_SHARED.
    public var ownershipType: String?
    public var offerType: Int32?
    public var offerIdentifier: String?
    public var offerDiscountType: String?
    /// The app's own user id, if the app set one at purchase.
    public var appAccountToken: String?
    /// In milliunits of `currency`.
    public var price: Int64?
    public var currency: String?
    /// The raw type and subtype of the notification that last changed this row.
    public var lastNotificationType: String
    public var lastNotificationSubtype: String?
    /// The signedDate of that notification: state only ever moves forward from it.
    public var lastSignedDate: Timestamp
    /// Apple's `data.status` as received (1 active … 5 revoked), nil when the notification had none.
    public var appleStatus: Int32?

    // Added in schema 4 (absent from rows written before: decoded as nil).

    /// The transaction whose period the row reflects (`expiresAt`, product, price, offer, revocation): a
    /// notification carrying an older one (the refund of an earlier renewal) records it in `transactions`
    /// without rolling the period back.
    public var periodTransactionId: String?
    /// That transaction's purchase date (with `expiresAt`, what "older" is measured by).
    public var periodPurchaseDate: Timestamp?
    /// Refunded share of the period's transaction, in thousandths of a percent (REFUND_PRORATED).
    public var revocationPercentage: Int32?
    /// Apple's id of the app download (per Apple Account and app): the link between a family member's row,
    /// which never has an `appAccountToken`, and the member's other purchases.
    public var appTransactionId: String?
    /// The `originalTransactionId` this subscription had before a switch to or from a bundle.
    public var previousOriginalTransactionId: String?
    /// Set on a `migrated` row: the `originalTransactionId` that continues it.
    public var supersededBy: String?
    /// The notificationUUID of the notification that last changed this row (the tie-breaker of equal signedDates).
    public var lastNotificationUUID: String?

    // Added in schema 9 (absent from rows written before: decoded as nil).

    /// Why the row contradicts Apple's last word (`EntitlementTransition.Contradiction`), nil when it does not.
    /// A contradicted row is pulled from Apple (Get All Subscription Statuses) to heal it.
    public var contradiction: String?
    /// The signedDate at which the contradiction was first seen (kept while it lasts).
    public var contradictedSince: Timestamp?
    /// While Apple says active but every date we hold has passed: access is granted until this backstop
    /// (`contradictedSince` + 7 days), never beyond; nil for the other contradictions.
    public var contradictionGrantsUntil: Timestamp?

    /// A row with what every row has; the other fields start empty.
    public init(environment: String, bundleId: String, originalTransactionId: String, status: Status, lastNotificationType: String, lastSignedDate: Timestamp) {
        self.environment = environment
        self.bundleId = bundleId
        self.originalTransactionId = originalTransactionId
        self.status = status
        self.lastNotificationType = lastNotificationType
        self.lastSignedDate = lastSignedDate
    }

    /// The expiry backstop's default leeway, as in the database's `entitlement_settings.expiry_leeway`.
    public static let defaultExpiryLeewayMilliseconds: Int64 = 2 * 60 * 1000

    /// Apple's longest billing grace period (28 days): the backstop of a grace period whose end date is unknown.
    public static let longestGracePeriodMilliseconds: Int64 = 28 * 24 * 3600 * 1000

    /// Whether the subscriber has access at `now`: the status must grant it, and an expiry in the past ends it
    /// even if the notification saying so has not arrived (yet): the expiry backstop, `leewayMilliseconds` late
    /// (a renewal notification a few minutes late then denies nothing; a lapsed subscriber keeps access that long).
    /// A grace period ends at `gracePeriodExpiresAt`; without one (no renewal info), Apple still grants access,
    /// so it ends at the latest Apple allows: 28 days after `expiresAt`.
    ///
    /// A row Apple says is active while every date we hold has passed (a renewal we have not seen) grants access
    /// until `contradictionGrantsUntil`, Apple's word meanwhile, bounded.
    public func isActive(at now: Timestamp, leewayMilliseconds: Int64 = defaultExpiryLeewayMilliseconds) -> Bool {
        guard status.grantsAccess else { return false }
        if let until = contradictionGrantsUntil, now < until { return true }
        let now = now.millisecondsSince1970 - leewayMilliseconds
        if status == .gracePeriod {
            if let grace = gracePeriodExpiresAt { return now < grace.millisecondsSince1970 }
            if let expiresAt { return now < expiresAt.millisecondsSince1970 + Self.longestGracePeriodMilliseconds }
            return true
        }
        if let expiresAt { return now < expiresAt.millisecondsSince1970 }
        return true
    }
}
