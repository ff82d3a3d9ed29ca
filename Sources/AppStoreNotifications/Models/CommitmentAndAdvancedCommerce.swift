/// [TransactionCommitmentInfo](https://developer.apple.com/documentation/appstoreserverapi/transactioncommitmentinfo):
/// a commitment plan's transaction (billed monthly for a committed term, `billingPlanType`).
public struct TransactionCommitmentInfo: Sendable, Hashable, Codable {
    /// Which installment of the commitment this transaction is (1…totalBillingPeriods).
    public var billingPeriodNumber: Int64?
    public var commitmentExpiresDate: Timestamp?
    /// The whole commitment's price, in milliunits.
    public var commitmentPrice: Int64?
    public var totalBillingPeriods: Int64?
}

/// [RenewalCommitmentInfo](https://developer.apple.com/documentation/appstoreserverapi/renewalcommitmentinfo):
/// what the commitment renews into.
public struct RenewalCommitmentInfo: Sendable, Hashable, Codable {
    public var commitmentAutoRenewProductId: String?
    public var rawCommitmentAutoRenewStatus: Int32?
    public var rawCommitmentRenewalBillingPlanType: String?
    public var commitmentRenewalDate: Timestamp?
    /// Milliunits.
    public var commitmentRenewalPrice: Int64?

    public var commitmentAutoRenewStatus: AutoRenewStatus? { rawCommitmentAutoRenewStatus.flatMap(AutoRenewStatus.init(rawValue:)) }
    public var commitmentRenewalBillingPlanType: BillingPlanType? { rawCommitmentRenewalBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case commitmentAutoRenewProductId
        case rawCommitmentAutoRenewStatus = "commitmentAutoRenewStatus"
        case rawCommitmentRenewalBillingPlanType = "commitmentRenewalBillingPlanType"
        case commitmentRenewalDate, commitmentRenewalPrice
    }
}

/// [advancedCommercePriceIncreaseInfoStatus](https://developer.apple.com/documentation/appstoreservernotifications/advancedcommercepriceincreaseinfostatus).
public enum AdvancedCommercePriceIncreaseStatus: String, Sendable, Hashable, CaseIterable, Codable {
    case scheduled = "SCHEDULED"
    case pending = "PENDING"
    case accepted = "ACCEPTED"
}

/// [AdvancedCommercePriceIncreaseInfo](https://developer.apple.com/documentation/appstoreserverapi/advancedcommercepriceincreaseinfo):
/// an Advanced Commerce item's price increase (in the renewal info's `advancedCommerceInfo.items[].priceIncreaseInfo`).
public struct AdvancedCommercePriceIncreaseInfo: Sendable, Hashable, Codable {
    public var dependentSKUs: [String]?
    /// The new price, in milliunits.
    public var price: Int64?
    public var rawStatus: String?

    public var status: AdvancedCommercePriceIncreaseStatus? { rawStatus.flatMap(AdvancedCommercePriceIncreaseStatus.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case dependentSKUs, price
        case rawStatus = "status"
    }
}

extension JWSTransactionDecodedPayload {
    /// `commitmentInfo`, typed (kept as received in `commitmentInfo`; nil when absent or not of Apple's shape).
    public var commitment: TransactionCommitmentInfo? {
        commitmentInfo.flatMap { try? JSONValueDecoder().decode(TransactionCommitmentInfo.self, from: $0) }
    }
}

extension JWSRenewalInfoDecodedPayload {
    /// `commitmentInfo`, typed (kept as received in `commitmentInfo`).
    public var commitment: RenewalCommitmentInfo? {
        commitmentInfo.flatMap { try? JSONValueDecoder().decode(RenewalCommitmentInfo.self, from: $0) }
    }

    /// Each Advanced Commerce item's price increase, by its SKU (`advancedCommerceInfo.items[].priceIncreaseInfo`).
    public var advancedCommercePriceIncreases: [(sku: String?, info: AdvancedCommercePriceIncreaseInfo)] {
        guard let items = advancedCommerceInfo?.objectValue?["items"]?.arrayValue else { return [] }
        return items.compactMap { item in
            guard let object = item.objectValue, let raw = object["priceIncreaseInfo"],
                let info = try? JSONValueDecoder().decode(AdvancedCommercePriceIncreaseInfo.self, from: raw)
            else { return nil }
            return (object["SKU"]?.stringValue, info)
        }
    }
}
