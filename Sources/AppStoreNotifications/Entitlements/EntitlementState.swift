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

    /// Whether the subscriber has access at `now`: the status must grant it, and an expiry in the past ends it
    /// even if the notification saying so has not arrived (yet): the expiry backstop.
    public func isActive(at now: Timestamp) -> Bool {
        guard status.grantsAccess else { return false }
        if status == .gracePeriod, let grace = gracePeriodExpiresAt { return now < grace }
        if let expiresAt { return now < expiresAt }
        return true
    }
}
