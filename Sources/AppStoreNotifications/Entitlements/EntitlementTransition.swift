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
/// | DID_FAIL_TO_RENEW / GRACE_PERIOD | grace period until `gracePeriodExpiresDate`; billing issue since signedDate |
/// | DID_FAIL_TO_RENEW / (none) | billing retry; billing issue since signedDate |
/// | GRACE_PERIOD_EXPIRED | billing retry (access ends; Apple keeps retrying) |
/// | EXPIRED / any | expired |
/// | REFUND | refunded; revocation date, reason, type |
/// | REVOKE | revoked (family sharing access ended) |
/// | REFUND_REVERSED | refund undone: revocation cleared, active again (expiry backstop still applies) |
/// | RENEWAL_EXTENDED | active; extended expiry |
/// | PRICE_INCREASE, PRICE_CHANGE, METADATA_UPDATE, MIGRATION | fields refreshed from transaction and renewal info; status kept |
/// | REFUND_DECLINED, CONSUMPTION_REQUEST, RENEWAL_EXTENSION, TEST, EXTERNAL_PURCHASE_TOKEN, RESCIND_CONSENT, ONE_TIME_CHARGE, unknown | no subscription state change (archived; one-time purchases are recorded per transaction) |
///
/// Apple's `data.status`, when present, is Apple's own view at signedDate and wins over the mapping for the
/// status (except that a refund is reported as `refunded`, a subtype of Apple's "revoked"). Only notifications
/// newer than the row's `lastSignedDate` change it: a late or replayed older notification is a no-op.
public enum EntitlementTransition {
    /// The result of applying one notification.
    public enum Outcome: Sendable, Hashable {
        /// The row to write.
        case updated(EntitlementState)
        /// The row is newer than this notification (or equal): nothing to write.
        case stale
        /// This notification carries no subscription state (TEST, summaries, tokens, one-time purchases, unknown types).
        case notApplicable
    }

    public static func apply(_ notification: VerifiedNotification, to current: EntitlementState?) -> Outcome {
        guard let transaction = notification.transactionInfo?.model,
            transaction.type == .autoRenewableSubscription || (transaction.rawType == nil && notification.renewalInfo != nil),
            let originalTransactionId = transaction.originalTransactionId
        else { return .notApplicable }
        let payload = notification.payload
        let type = payload.notificationType
        switch type {
        case .none, .test, .externalPurchaseToken, .rescindConsent, .oneTimeCharge, .consumptionRequest, .refundDeclined, .renewalExtension:
            return .notApplicable
        default:
            break
        }
        let signedDate = notification.signedDate
        if let current, current.lastSignedDate >= signedDate { return .stale }

        let renewal = notification.renewalInfo?.model
        var state = current ?? EntitlementState(
            environment: notification.environment.rawValue, bundleId: notification.bundleId, originalTransactionId: originalTransactionId,
            status: .active, lastNotificationType: payload.rawNotificationType ?? "", lastSignedDate: signedDate)

        // Fields every notification refreshes from its (verified) transaction and renewal info.
        state.productId = transaction.productId ?? state.productId
        state.subscriptionGroupIdentifier = transaction.subscriptionGroupIdentifier ?? state.subscriptionGroupIdentifier
        state.expiresAt = transaction.expiresDate ?? state.expiresAt
        state.ownershipType = transaction.rawInAppOwnershipType ?? state.ownershipType
        state.appAccountToken = transaction.appAccountToken ?? state.appAccountToken
        state.price = transaction.price ?? state.price
        state.currency = transaction.currency ?? state.currency
        state.offerType = transaction.rawOfferType
        state.offerIdentifier = transaction.offerIdentifier
        state.offerDiscountType = transaction.rawOfferDiscountType
        if let renewal {
            state.autoRenewStatus = renewal.rawAutoRenewStatus ?? state.autoRenewStatus
            state.autoRenewProductId = renewal.autoRenewProductId ?? state.autoRenewProductId
            state.gracePeriodExpiresAt = renewal.gracePeriodExpiresDate
        }

        switch type {
        case .subscribed, .didRenew, .offerRedeemed, .renewalExtended:
            state.status = .active
            state.billingIssueSince = nil
            state.gracePeriodExpiresAt = nil
            clearRevocation(&state)
        case .didFailToRenew:
            state.status = payload.subtype == .gracePeriod ? .gracePeriod : .billingRetry
            state.billingIssueSince = state.billingIssueSince ?? signedDate
        case .gracePeriodExpired:
            state.status = .billingRetry
            state.billingIssueSince = state.billingIssueSince ?? signedDate
        case .expired:
            state.status = .expired
        case .refund:
            state.status = .refunded
            applyRevocation(transaction, to: &state)
        case .revoke:
            state.status = .revoked
            applyRevocation(transaction, to: &state)
        case .refundReversed:
            state.status = .active
            clearRevocation(&state)
        case .didChangeRenewalPref, .didChangeRenewalStatus, .priceIncrease, .priceChange, .metadataUpdate, .migration:
            break  // fields refreshed above; status unchanged
        default:
            break
        }

        // Apple's own status at signedDate, when given, is authoritative (a refund stays "refunded").
        state.appleStatus = notification.payload.data?.rawStatus
        if let appleStatus = notification.payload.data?.status {
            switch appleStatus {
            case .active: state.status = .active
            case .expired: state.status = .expired
            case .billingRetry: state.status = .billingRetry
            case .billingGracePeriod: state.status = .gracePeriod
            case .revoked: if state.status != .refunded { state.status = .revoked }
            }
        }
        state.lastNotificationType = payload.rawNotificationType ?? ""
        state.lastNotificationSubtype = payload.rawSubtype
        state.lastSignedDate = signedDate
        return .updated(state)
    }

    static func applyRevocation(_ transaction: JWSTransactionDecodedPayload, to state: inout EntitlementState) {
        state.revocationDate = transaction.revocationDate
        state.revocationReason = transaction.rawRevocationReason
        state.revocationType = transaction.rawRevocationType
    }

    static func clearRevocation(_ state: inout EntitlementState) {
        state.revocationDate = nil
        state.revocationReason = nil
        state.revocationType = nil
    }
}
