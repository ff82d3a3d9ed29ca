/// An enum-like field whose raw value this version does not know (Apple added a case). The value is kept as it
/// came (the models store raw values) and the notification is processed; the worker counts these so an operator
/// sees that an upgrade is due.
public struct UnknownValue: Sendable, Hashable {
    /// The field's path, e.g. `notificationType`, `transactionInfo.type`.
    public var field: String
    /// The raw value as received.
    public var rawValue: String
}

extension VerifiedNotification {
    /// The `notificationType`s of the records this pipeline makes itself (`PulledRecordKind`), not Apple's.
    public static let pipelineRecordTypes: Set<String> = [
        StatusSnapshotDocument.notificationType, SignedPayloadVerifier.historyTransactionType, EntitlementEventCause.purchaseType,
    ]

    /// Whether this record is one of ours (a pulled snapshot, a history transaction, a purchase posted to the
    /// customer API) rather than one of Apple's notifications.
    public var isPipelineRecord: Bool { payload.rawNotificationType.map(Self.pipelineRecordTypes.contains) ?? false }

    /// Every enum-like field, top-level and nested, whose raw value is not a known case.
    public var unknownValues: [UnknownValue] {
        var unknown: [UnknownValue] = []
        func check<Raw: CustomStringConvertible, Known>(_ field: String, _ raw: Raw?, _ known: Known?) {
            if let raw, known == nil { unknown.append(UnknownValue(field: field, rawValue: raw.description)) }
        }
        // Our own record kinds (a purchase posted to the customer API, a pulled snapshot or history transaction)
        // carry a type of ours, not Apple's: known by definition, never reported as Apple's unknown value.
        if !isPipelineRecord { check("notificationType", payload.rawNotificationType, payload.notificationType) }
        check("subtype", payload.rawSubtype, payload.subtype)
        if let data = payload.data {
            check("data.environment", data.rawEnvironment, data.environment)
            check("data.status", data.rawStatus, data.status)
            check("data.consumptionRequestReason", data.rawConsumptionRequestReason, data.consumptionRequestReason)
        }
        if let t = transactionInfo?.model {
            check("transactionInfo.type", t.rawType, t.type)
            check("transactionInfo.inAppOwnershipType", t.rawInAppOwnershipType, t.inAppOwnershipType)
            check("transactionInfo.revocationReason", t.rawRevocationReason, t.revocationReason)
            check("transactionInfo.offerType", t.rawOfferType, t.offerType)
            check("transactionInfo.transactionReason", t.rawTransactionReason, t.transactionReason)
            check("transactionInfo.offerDiscountType", t.rawOfferDiscountType, t.offerDiscountType)
            check("transactionInfo.revocationType", t.rawRevocationType, t.revocationType)
            check("transactionInfo.billingPlanType", t.rawBillingPlanType, t.billingPlanType)
        }
        if let r = renewalInfo?.model {
            check("renewalInfo.expirationIntent", r.rawExpirationIntent, r.expirationIntent)
            check("renewalInfo.autoRenewStatus", r.rawAutoRenewStatus, r.autoRenewStatus)
            check("renewalInfo.priceIncreaseStatus", r.rawPriceIncreaseStatus, r.priceIncreaseStatus)
            check("renewalInfo.offerType", r.rawOfferType, r.offerType)
            check("renewalInfo.offerDiscountType", r.rawOfferDiscountType, r.offerDiscountType)
            check("renewalInfo.renewalBillingPlanType", r.rawRenewalBillingPlanType, r.renewalBillingPlanType)
            if let commitment = r.commitment {
                check("renewalInfo.commitmentInfo.commitmentAutoRenewStatus", commitment.rawCommitmentAutoRenewStatus, commitment.commitmentAutoRenewStatus)
                check(
                    "renewalInfo.commitmentInfo.commitmentRenewalBillingPlanType", commitment.rawCommitmentRenewalBillingPlanType,
                    commitment.commitmentRenewalBillingPlanType)
            }
            for increase in r.advancedCommercePriceIncreases {
                check("renewalInfo.advancedCommerceInfo.items.priceIncreaseInfo.status", increase.info.rawStatus, increase.info.status)
            }
        }
        return unknown
    }
}
