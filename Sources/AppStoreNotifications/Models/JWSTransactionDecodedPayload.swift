/// [JWSTransactionDecodedPayload](https://developer.apple.com/documentation/appstoreserverapi/jwstransactiondecodedpayload):
/// one purchase, renewal, upgrade, refund or revocation of an in-app product.
public struct JWSTransactionDecodedPayload: Sendable, Hashable, Codable {
    /// Stable across renewals of one subscription: the key of an entitlement.
    public var originalTransactionId: String?
    /// Unique per transaction (each renewal has its own).
    public var transactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: Timestamp?
    public var originalPurchaseDate: Timestamp?
    public var expiresDate: Timestamp?
    public var quantity: Int32?
    public var rawType: String?
    /// The app's own user id, if the app set one at purchase time.
    public var appAccountToken: String?
    public var rawInAppOwnershipType: String?
    public var signedDate: Timestamp?
    public var rawRevocationReason: Int32?
    public var revocationDate: Timestamp?
    public var isUpgraded: Bool?
    public var rawOfferType: Int32?
    public var offerIdentifier: String?
    public var rawEnvironment: String?
    public var storefront: String?
    public var storefrontId: String?
    public var rawTransactionReason: String?
    public var currency: String?
    /// Price in milliunits of `currency`.
    public var price: Int64?
    public var rawOfferDiscountType: String?
    public var appTransactionId: String?
    /// ISO 8601 duration of the offer, e.g. `P1M`.
    public var offerPeriod: String?
    public var rawRevocationType: String?
    /// Refunded share in thousandths of a percent (100000 = 100 %).
    public var revocationPercentage: Int32?
    /// Advanced Commerce API details, kept verbatim.
    public var advancedCommerceInfo: JSONValue?
    public var rawBillingPlanType: String?
    /// Commitment (monthly billing of a yearly plan) details, kept verbatim.
    public var commitmentInfo: JSONValue?
    /// Set when a switch to or from a subscription bundle gave the subscription a new `originalTransactionId`:
    /// the one it had before (whose entitlement this one supersedes).
    public var previousOriginalTransactionId: String?

    public var type: ProductType? { rawType.flatMap(ProductType.init(rawValue:)) }
    public var inAppOwnershipType: InAppOwnershipType? { rawInAppOwnershipType.flatMap(InAppOwnershipType.init(rawValue:)) }
    public var revocationReason: RevocationReason? { rawRevocationReason.flatMap(RevocationReason.init(rawValue:)) }
    public var offerType: OfferType? { rawOfferType.flatMap(OfferType.init(rawValue:)) }
    public var environment: Environment? { rawEnvironment.flatMap(Environment.init(rawValue:)) }
    public var transactionReason: TransactionReason? { rawTransactionReason.flatMap(TransactionReason.init(rawValue:)) }
    public var offerDiscountType: OfferDiscountType? { rawOfferDiscountType.flatMap(OfferDiscountType.init(rawValue:)) }
    public var revocationType: RevocationType? { rawRevocationType.flatMap(RevocationType.init(rawValue:)) }
    public var billingPlanType: BillingPlanType? { rawBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case originalTransactionId, transactionId, webOrderLineItemId, bundleId, productId, subscriptionGroupIdentifier
        case purchaseDate, originalPurchaseDate, expiresDate, quantity
        case rawType = "type"
        case appAccountToken
        case rawInAppOwnershipType = "inAppOwnershipType"
        case signedDate
        case rawRevocationReason = "revocationReason"
        case revocationDate, isUpgraded
        case rawOfferType = "offerType"
        case offerIdentifier
        case rawEnvironment = "environment"
        case storefront, storefrontId
        case rawTransactionReason = "transactionReason"
        case currency, price
        case rawOfferDiscountType = "offerDiscountType"
        case appTransactionId, offerPeriod
        case rawRevocationType = "revocationType"
        case revocationPercentage, advancedCommerceInfo
        case rawBillingPlanType = "billingPlanType"
        case commitmentInfo, previousOriginalTransactionId
    }
}
