/// [JWSRenewalInfoDecodedPayload](https://developer.apple.com/documentation/appstoreserverapi/jwsrenewalinfodecodedpayload):
/// what will happen at the next renewal of a subscription.
public struct JWSRenewalInfoDecodedPayload: Sendable, Hashable, Codable {
    public var rawExpirationIntent: Int32?
    public var originalTransactionId: String?
    /// The product that renews next: differs from `productId` while a downgrade is pending.
    public var autoRenewProductId: String?
    public var productId: String?
    public var rawAutoRenewStatus: Int32?
    public var isInBillingRetryPeriod: Bool?
    public var rawPriceIncreaseStatus: Int32?
    public var gracePeriodExpiresDate: Timestamp?
    public var rawOfferType: Int32?
    public var offerIdentifier: String?
    public var signedDate: Timestamp?
    public var rawEnvironment: String?
    public var recentSubscriptionStartDate: Timestamp?
    public var renewalDate: Timestamp?
    public var currency: String?
    /// Price of the next renewal in milliunits of `currency`.
    public var renewalPrice: Int64?
    public var rawOfferDiscountType: String?
    public var eligibleWinBackOfferIds: [String]?
    public var appAccountToken: String?
    public var appTransactionId: String?
    public var offerPeriod: String?
    public var advancedCommerceInfo: JSONValue?
    public var commitmentInfo: JSONValue?
    public var rawRenewalBillingPlanType: String?

    public var expirationIntent: ExpirationIntent? { rawExpirationIntent.flatMap(ExpirationIntent.init(rawValue:)) }
    public var autoRenewStatus: AutoRenewStatus? { rawAutoRenewStatus.flatMap(AutoRenewStatus.init(rawValue:)) }
    public var priceIncreaseStatus: PriceIncreaseStatus? { rawPriceIncreaseStatus.flatMap(PriceIncreaseStatus.init(rawValue:)) }
    public var offerType: OfferType? { rawOfferType.flatMap(OfferType.init(rawValue:)) }
    public var environment: Environment? { rawEnvironment.flatMap(Environment.init(rawValue:)) }
    public var offerDiscountType: OfferDiscountType? { rawOfferDiscountType.flatMap(OfferDiscountType.init(rawValue:)) }
    public var renewalBillingPlanType: BillingPlanType? { rawRenewalBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case rawExpirationIntent = "expirationIntent"
        case originalTransactionId, autoRenewProductId, productId
        case rawAutoRenewStatus = "autoRenewStatus"
        case isInBillingRetryPeriod
        case rawPriceIncreaseStatus = "priceIncreaseStatus"
        case gracePeriodExpiresDate
        case rawOfferType = "offerType"
        case offerIdentifier, signedDate
        case rawEnvironment = "environment"
        case recentSubscriptionStartDate, renewalDate, currency, renewalPrice
        case rawOfferDiscountType = "offerDiscountType"
        case eligibleWinBackOfferIds, appAccountToken, appTransactionId, offerPeriod, advancedCommerceInfo, commitmentInfo
        case rawRenewalBillingPlanType = "renewalBillingPlanType"
    }
}
