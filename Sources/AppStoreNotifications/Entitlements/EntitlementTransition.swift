/// How a verified notification changes a subscription's entitlement: the mapping, in one place.
///
/// | notificationType / subtype | effect |
/// |---|---|
/// | SUBSCRIBED / INITIAL_BUY, RESUBSCRIBE | active; product, expiry, offer and price from the transaction; billing issue and revocation cleared |
/// | DID_RENEW (BILLING_RECOVERY) | active; new expiry; billing issue and grace period cleared |
/// | OFFER_REDEEMED / any | active; offer fields and product from the transaction |
/// | DID_CHANGE_RENEWAL_PREF / UPGRADE | product changes now (transaction) |
/// | DID_CHANGE_RENEWAL_PREF / DOWNGRADE | pending: `autoRenewProductId` from the renewal info, product unchanged |
/// | DID_CHANGE_RENEWAL_PREF / (none) | pending change reverted: `autoRenewProductId` from the renewal info |
/// | DID_CHANGE_RENEWAL_STATUS / AUTO_RENEW_ENABLED, _DISABLED | `autoRenewStatus` only |
/// | DID_FAIL_TO_RENEW / GRACE_PERIOD | grace period until `gracePeriodExpiresDate`; billing issue since the period's end |
/// | DID_FAIL_TO_RENEW / (none) | billing retry; billing issue since the period's end |
/// | GRACE_PERIOD_EXPIRED | billing retry (access ends; Apple keeps retrying) |
/// | EXPIRED / any | expired |
/// | REFUND of the period's transaction | refunded; revocation date, reason, type, percentage |
/// | REFUND of an older transaction | recorded in `transactions`; the row's period and access unchanged |
/// | REVOKE | revoked (family sharing access ended) |
/// | REFUND_REVERSED | refund undone: revocation cleared, active again (expiry backstop still applies) |
/// | any, with `previousOriginalTransactionId` | the previous subscription's row becomes `migrated` (no access) |
/// | RENEWAL_EXTENDED | active; extended expiry |
/// | PRICE_INCREASE, PRICE_CHANGE, METADATA_UPDATE, MIGRATION | fields refreshed from transaction and renewal info; status kept |
/// | PURCHASE (customer API) of the period's transaction | active while its period is open at its signedDate; refunded/revoked when revoked; a first-seen ended period expired |
/// | REFUND_DECLINED, CONSUMPTION_REQUEST, RENEWAL_EXTENSION, TEST, EXTERNAL_PURCHASE_TOKEN, RESCIND_CONSENT, ONE_TIME_CHARGE, unknown | no subscription state change (archived; one-time purchases are recorded per transaction) |
///
/// Apple's `data.status`, when present, is Apple's own view at signedDate and wins over the mapping for the
/// status (except that a refund is reported as `refunded`, a subtype of Apple's "revoked"). A status snapshot
/// (`STATUS_SNAPSHOT`, from Get All Subscription Statuses) is exactly that view, with nothing else to map: it
/// refreshes the fields and sets the status, ordered by its signedDate like any notification.
///
/// **Order.** Notifications of one subscription take effect in `EntitlementTransition.Order`: signedDate, then
/// Apple's status severity, then notificationUUID. A notification not after the row's order is stale (a late or
/// replayed one changes nothing); two with the same signedDate are ordered, never dropped for the tie, so any
/// delivery order and any replay end in the same row.
///
/// **Period.** A notification may carry an *older* transaction than the one the row reflects (the refund of an
/// earlier renewal, the upgraded-from transaction): period fields (product, expiry, price, offer, revocation)
/// come only from a transaction not older than the row's (`expiresDate`, then `purchaseDate`) and never from an
/// `isUpgraded` one; Apple's status and the renewal info still apply. The older transaction's refund is recorded
/// in `transactions`. Where the row has no period yet, the renewal info's `renewalDate` (the latest period's end)
/// and `productId` stand in.
public enum EntitlementTransition {
    /// The result of applying one notification.
    public enum Outcome: Sendable, Hashable {
        /// The row to write.
        case updated(EntitlementState)
        /// The row already reflects this notification or a later one: nothing to write.
        case stale
        /// This notification carries no subscription state (TEST, summaries, tokens, one-time purchases, unknown types).
        case notApplicable
    }

    /// The total order of one subscription's notifications.
    public struct Order: Sendable, Hashable, Comparable {
        public var signedDate: Int64
        /// Apple's status, ranked: none < active < grace period < billing retry < expired < revoked.
        public var severity: Int
        public var notificationUUID: String

        public static func < (a: Order, b: Order) -> Bool {
            (a.signedDate, a.severity, a.notificationUUID) < (b.signedDate, b.severity, b.notificationUUID)
        }

        /// A sortable text form (the SQL guard compares it): zero-padded millis, severity, notificationUUID.
        public var key: String {
            let millis = String(max(signedDate, 0))
            return String(repeating: "0", count: max(0, 15 - millis.count)) + millis + "." + String(severity) + "." + notificationUUID
        }

        static func severity(ofAppleStatus status: Int32?) -> Int {
            switch status {
            case nil: 0
            case 1: 1
            case 4: 2
            case 3: 3
            case 2: 4
            case 5: 5
            default: 6  // a status Apple adds later sorts after every known one, deterministically
            }
        }
    }

    public static func order(of notification: VerifiedNotification) -> Order {
        Order(
            signedDate: notification.signedDate.millisecondsSince1970, severity: Order.severity(ofAppleStatus: notification.payload.data?.rawStatus),
            notificationUUID: notification.payload.notificationUUID ?? "")
    }

    public static func order(of state: EntitlementState) -> Order {
        Order(signedDate: state.lastSignedDate.millisecondsSince1970, severity: Order.severity(ofAppleStatus: state.appleStatus), notificationUUID: state.lastNotificationUUID ?? "")
    }

    public static func apply(_ notification: VerifiedNotification, to current: EntitlementState?) -> Outcome {
        guard let transaction = notification.transactionInfo?.model,
            transaction.type == .autoRenewableSubscription || (transaction.rawType == nil && notification.renewalInfo != nil),
            let originalTransactionId = transaction.originalTransactionId
        else { return .notApplicable }
        let payload = notification.payload
        let type = payload.notificationType
        // A status snapshot (reconcile, import) is Apple's status at its signedDate: fields refresh from its
        // transaction and renewal info, and its status decides, like any notification's `data.status`.
        let isSnapshot = payload.rawNotificationType == StatusSnapshotDocument.notificationType
        // A purchase posted through the customer API: the transaction StoreKit gave the app, ordered by its
        // signedDate like a notification, so Apple's SUBSCRIBED for it that follows changes nothing material.
        let isPurchase = payload.rawNotificationType == PurchaseRecordDocument.notificationType
        switch type {
        case .none where !isSnapshot && !isPurchase:
            return .notApplicable
        case .test, .externalPurchaseToken, .rescindConsent, .oneTimeCharge, .consumptionRequest, .refundDeclined, .renewalExtension:
            return .notApplicable
        default:
            break
        }
        let signedDate = notification.signedDate
        if let current, order(of: notification) <= order(of: current) { return .stale }

        let renewal = notification.renewalInfo?.model
        var state = current ?? EntitlementState(
            environment: notification.environment.rawValue, bundleId: notification.bundleId, originalTransactionId: originalTransactionId,
            status: .active, lastNotificationType: payload.rawNotificationType ?? "", lastSignedDate: signedDate)

        // What belongs to the subscription whatever the transaction: ownership and the ids that link customers.
        state.ownershipType = transaction.rawInAppOwnershipType ?? state.ownershipType
        state.appAccountToken = transaction.appAccountToken ?? state.appAccountToken
        state.appTransactionId = transaction.appTransactionId ?? renewal?.appTransactionId ?? state.appTransactionId
        state.previousOriginalTransactionId = transaction.previousOriginalTransactionId ?? state.previousOriginalTransactionId
        state.subscriptionGroupIdentifier = transaction.subscriptionGroupIdentifier ?? state.subscriptionGroupIdentifier

        // The period: only from a transaction not older than the row's.
        let carriesPeriod = carriesCurrentPeriod(transaction, renewal: renewal, row: current)
        if carriesPeriod {
            state.productId = transaction.productId ?? state.productId
            state.expiresAt = transaction.expiresDate ?? state.expiresAt
            state.price = transaction.price ?? state.price
            state.currency = transaction.currency ?? state.currency
            state.offerType = transaction.rawOfferType
            state.offerIdentifier = transaction.offerIdentifier
            state.offerDiscountType = transaction.rawOfferDiscountType
            state.periodTransactionId = transaction.transactionId
            state.periodPurchaseDate = transaction.purchaseDate
            // Revocation columns describe the period's transaction: set when it is revoked, cleared when not.
            state.revocationDate = transaction.revocationDate
            state.revocationReason = transaction.rawRevocationReason
            state.revocationType = transaction.rawRevocationType
            state.revocationPercentage = transaction.revocationPercentage
        } else if state.expiresAt == nil, let renewal {
            // First seen through an older transaction: the renewal info knows the latest period's end and product.
            state.expiresAt = renewal.renewalDate
            state.productId = renewal.productId ?? state.productId
            state.currency = renewal.currency ?? state.currency
        }
        if let renewal {
            state.autoRenewStatus = renewal.rawAutoRenewStatus ?? state.autoRenewStatus
            state.autoRenewProductId = renewal.autoRenewProductId ?? state.autoRenewProductId
            state.gracePeriodExpiresAt = renewal.gracePeriodExpiresDate
        }

        switch type {
        case .subscribed, .didRenew, .offerRedeemed, .renewalExtended:
            state.status = .active
            state.gracePeriodExpiresAt = nil
        case .didFailToRenew:
            state.status = payload.subtype == .gracePeriod ? .gracePeriod : .billingRetry
        case .gracePeriodExpired:
            state.status = .billingRetry
        case .expired:
            state.status = .expired
        case .refund where carriesPeriod:
            state.status = .refunded
        case .revoke where carriesPeriod:
            state.status = .revoked
        case .refundReversed where carriesPeriod:
            state.status = .active
        case .none where isPurchase && carriesPeriod:
            // The posted transaction proves its period: open at its signedDate, active; revoked, as a refund or
            // revocation says; already over, expired only for a subscription first seen this way (a restored old
            // period changes nothing else).
            if let revocationType = transaction.rawRevocationType ?? (transaction.revocationDate != nil ? "" : nil) {
                state.status = revocationType.hasPrefix("REFUND") || revocationType.isEmpty ? .refunded : .revoked
            } else if (transaction.expiresDate.map { $0 > signedDate }) ?? false {
                state.status = .active
                state.gracePeriodExpiresAt = nil
            } else if current == nil {
                state.status = .expired
            }
        default:
            break  // fields refreshed above; status unchanged (an older transaction's refund changes no access)
        }

        // Apple's own status at signedDate, when given, is authoritative. Its "revoked" is a refund when the
        // period's transaction was refunded (or this is the refund of it).
        state.appleStatus = payload.data?.rawStatus
        if let appleStatus = payload.data?.status {
            switch appleStatus {
            case .active: state.status = .active
            case .expired: state.status = .expired
            case .billingRetry: state.status = .billingRetry
            case .billingGracePeriod: state.status = .gracePeriod
            case .revoked:
                let refunded = state.status == .refunded || (type == .refund && carriesPeriod) || (state.revocationType?.hasPrefix("REFUND") ?? false)
                state.status = refunded ? .refunded : .revoked
            }
        }
        // A billing problem began when the period ended unpaid: derived from the period, so the same whichever
        // of the period's notifications is seen first.
        let billingProblem = state.status == .billingRetry || state.status == .gracePeriod || (state.status == .expired && payload.subtype == .billingRetry)
        state.billingIssueSince = billingProblem ? (state.expiresAt ?? signedDate) : nil
        state.supersededBy = nil
        markContradiction(&state, at: signedDate, firstSeenThroughOlderTransaction: current == nil && !carriesPeriod)
        state.lastNotificationType = payload.rawNotificationType ?? ""
        state.lastNotificationSubtype = payload.rawSubtype
        state.lastSignedDate = signedDate
        state.lastNotificationUUID = payload.notificationUUID
        return .updated(state)
    }

    /// Why a row contradicts Apple's last word. Each is healed by pulling Apple's statuses for the subscription.
    public enum Contradiction: String, Sendable, CaseIterable {
        /// Apple's `data.status` is 1 or 4 (active, grace) but no date we hold (expiry, grace end) is after the
        /// notification's signedDate: a newer period exists that no notification has shown us.
        case appleActiveDatesPassed
        /// Apple's status is 2 or 5 (expired, revoked) while the period we hold is still open.
        case appleInactivePeriodOpen
        /// The first notification seen for the subscription carries an older transaction than its current period
        /// (deployed mid-life, or the notifications of the current period were lost).
        case firstSeenOlderTransaction
    }

    /// How long a row Apple says is active grants access past every date we hold, at most: from the contradiction's
    /// first signedDate. A week: a renewal notification Apple retries reaches us well within it, and the status
    /// pull heals the row in seconds when an API key is configured.
    public static let contradictionGrantMilliseconds: Int64 = 7 * 24 * 3600 * 1000

    /// Sets (or clears) the row's contradiction at `signedDate`, after Apple's status was applied.
    static func markContradiction(_ state: inout EntitlementState, at signedDate: Timestamp, firstSeenThroughOlderTransaction: Bool) {
        let now = signedDate.millisecondsSince1970
        let future = [state.expiresAt, state.gracePeriodExpiresAt].contains { ($0?.millisecondsSince1970 ?? Int64.min) > now }
        let reason: Contradiction?
        switch state.appleStatus {
        case 1?, 4?: reason = future ? (firstSeenThroughOlderTransaction ? .firstSeenOlderTransaction : nil) : .appleActiveDatesPassed
        case 2?, 5?: reason = (state.expiresAt?.millisecondsSince1970 ?? Int64.min) > now && state.revocationDate == nil ? .appleInactivePeriodOpen : nil
        default: reason = firstSeenThroughOlderTransaction ? .firstSeenOlderTransaction : nil
        }
        guard let reason else {
            state.contradiction = nil
            state.contradictedSince = nil
            state.contradictionGrantsUntil = nil
            return
        }
        if state.contradiction != reason.rawValue || state.contradictedSince == nil { state.contradictedSince = signedDate }
        state.contradiction = reason.rawValue
        state.contradictionGrantsUntil = reason == .appleActiveDatesPassed && state.status.grantsAccess
            ? Timestamp(millisecondsSince1970: state.contradictedSince!.millisecondsSince1970 + contradictionGrantMilliseconds) : nil
    }

    /// Whether `transaction` is the row's period (or a newer one), as opposed to an older transaction of the
    /// same subscription: an `isUpgraded` transaction never is; one that ends before the row's period (by
    /// `expiresDate`, then `purchaseDate`) or before the renewal info's `renewalDate` is not.
    static func carriesCurrentPeriod(_ transaction: JWSTransactionDecodedPayload, renewal: JWSRenewalInfoDecodedPayload?, row: EntitlementState?) -> Bool {
        if transaction.isUpgraded == true { return false }
        if let row, let id = transaction.transactionId, id == row.periodTransactionId { return true }
        guard let expires = transaction.expiresDate else { return true }
        if let renewalDate = renewal?.renewalDate, renewalDate > expires { return false }
        guard let row, let rowExpires = row.expiresAt else { return true }
        if expires != rowExpires { return expires > rowExpires }
        guard let purchase = transaction.purchaseDate, let rowPurchase = row.periodPurchaseDate else { return true }
        return purchase >= rowPurchase
    }

    /// The row of the subscription that `successor` continues under a new originalTransactionId (a switch to or
    /// from a bundle): marked `migrated`, so it stops granting access, at `successor`'s order, so an older
    /// notification of it arriving later is stale. Nil when that row is already past `successor`'s order.
    public static func supersede(_ previous: EntitlementState?, originalTransactionId: String, by successor: EntitlementState) -> EntitlementState? {
        if let previous, order(of: previous) >= order(of: successor) { return nil }
        var state = previous ?? EntitlementState(
            environment: successor.environment, bundleId: successor.bundleId, originalTransactionId: originalTransactionId,
            status: .migrated, lastNotificationType: successor.lastNotificationType, lastSignedDate: successor.lastSignedDate)
        state.status = .migrated
        state.supersededBy = successor.originalTransactionId
        state.billingIssueSince = nil
        state.subscriptionGroupIdentifier = state.subscriptionGroupIdentifier ?? successor.subscriptionGroupIdentifier
        state.appAccountToken = state.appAccountToken ?? successor.appAccountToken
        state.appTransactionId = state.appTransactionId ?? successor.appTransactionId
        state.lastNotificationType = successor.lastNotificationType
        state.lastNotificationSubtype = successor.lastNotificationSubtype
        state.lastSignedDate = successor.lastSignedDate
        state.lastNotificationUUID = successor.lastNotificationUUID
        state.appleStatus = successor.appleStatus
        return state
    }
}
