import AppStoreNotifications
/// [RefundHistoryResponse](https://developer.apple.com/documentation/appstoreserverapi/refundhistoryresponse): one
/// page of Get Refund History v2 (the customer's refunded transactions, up to 20 a page, most recent first).
public struct RefundHistoryResponse: Sendable, Hashable, Decodable {
    public var signedTransactions: [String]
    /// The token for the next page.
    public var revision: String?
    public var hasMore: Bool

    enum CodingKeys: String, CodingKey { case signedTransactions, revision, hasMore }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        signedTransactions = try container.decodeIfPresent([String].self, forKey: .signedTransactions) ?? []
        revision = try container.decodeIfPresent(String.self, forKey: .revision)
        hasMore = try container.decodeIfPresent(Bool.self, forKey: .hasMore) ?? false
        if hasMore, revision?.isEmpty ?? true {
            throw DecodingError.keyNotFound(CodingKeys.revision, .init(codingPath: decoder.codingPath, debugDescription: "is missing although hasMore is true"))
        }
    }
}

/// [extendReasonCode](https://developer.apple.com/documentation/appstoreserverapi/extendreasoncode).
public enum ExtendReasonCode: Int32, Sendable, Hashable, CaseIterable {
    case undeclared = 0
    case customerSatisfaction = 1
    case other = 2
    case serviceIssueOrOutage = 3
}

/// The body of [Extend a Subscription Renewal Date](https://developer.apple.com/documentation/appstoreserverapi/extend-a-subscription-renewal-date)
/// (`ExtendRenewalDateRequest`) and of its mass form (`MassExtendRenewalDateRequest`, with a product and storefronts),
/// checked against Apple's rules before anything is sent.
public struct RenewalExtensionRequest: Sendable, Hashable {
    /// 1…90.
    public var extendByDays: Int32
    public var extendReasonCode: ExtendReasonCode
    /// Ours, kept before the call, so a retry sends the same one and Apple applies the extension once: a UUID.
    public var requestIdentifier: String
    /// Mass extensions only: the product, and the storefronts (ISO 3166-1 alpha-3; none: every storefront).
    public var productId: String?
    public var storefrontCountryCodes: [String] = []

    public static let maximumDays: Int32 = 90

    public init(extendByDays: Int32, extendReasonCode: ExtendReasonCode, requestIdentifier: String, productId: String? = nil, storefrontCountryCodes: [String] = []) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.requestIdentifier = requestIdentifier
        self.productId = productId
        self.storefrontCountryCodes = storefrontCountryCodes
    }

    /// Apple's request rules (the eligibility of a subscription is `RenewalExtensionEligibility`).
    public func validate() throws(RenewalExtensionRefusal) {
        guard (1...Self.maximumDays).contains(extendByDays) else {
            throw RenewalExtensionRefusal(rule: "extendByDays must be 1 to 90 (Apple's InvalidExtendByDaysError 4000009)")
        }
        guard !requestIdentifier.isEmpty, requestIdentifier.utf8.count <= 128 else {
            throw RenewalExtensionRefusal(rule: "requestIdentifier must be 1 to 128 characters (InvalidRequestIdentifierError 4000011)")
        }
        if let productId, productId.isEmpty { throw RenewalExtensionRefusal(rule: "productId must not be empty") }
        for code in storefrontCountryCodes where code.utf8.count != 3 || !code.utf8.allSatisfy({ (0x41...0x5A).contains($0) }) {
            throw RenewalExtensionRefusal(rule: "storefront \(UntrustedText.quoted(code, limit: 20)) is not an ISO 3166-1 alpha-3 code in capitals (e.g. USA, FRA)")
        }
    }

    public var json: JSONObject {
        var object = JSONObject([
            "extendByDays": .number(JSONNumber(Int64(extendByDays))), "extendReasonCode": .number(JSONNumber(Int64(extendReasonCode.rawValue))),
            "requestIdentifier": .string(requestIdentifier),
        ])
        if let productId {
            object["productId"] = .string(productId)
            object["storefrontCountryCodes"] = .array(storefrontCountryCodes.map { .string($0) })
        }
        return object
    }
}

/// An extension refused before any call, with the rule (and Apple's code for it, where Apple has one).
public struct RenewalExtensionRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    public var rule: String
    public init(rule: String) { self.rule = rule }
    public var description: String { "not sent to Apple: \(rule)" }
}

/// Apple's eligibility rules for extending one subscription, checked on our row before calling.
public enum RenewalExtensionEligibility {
    /// At most this many extensions of one subscription in 365 days.
    public static let maximumPerYear = 2

    /// `status`: `entitlements.status`; `offerDiscountType`: the current period's (`FREE_TRIAL` is a free offer);
    /// `ownershipType`: `FAMILY_SHARED` for a family member (`purchaser`: the purchaser's originalTransactionId when
    /// we know it); `extensionsInLastYear`: successful extensions of this subscription in the last 365 days.
    public static func check(
        status: String, offerType: Int32?, offerDiscountType: String?, ownershipType: String?, purchaser: String?, extensionsInLastYear: Int
    ) throws(RenewalExtensionRefusal) {
        if ownershipType == "FAMILY_SHARED" {
            throw RenewalExtensionRefusal(rule: "this is a family member's subscription: extend the purchaser's (\(purchaser.map { "originalTransactionId \($0)" } ?? "its originalTransactionId, not stored here")) instead (FamilySharedSubscriptionExtensionIneligibleError 4030007)")
        }
        switch status {
        case "expired", "refunded", "revoked", "migrated":
            throw RenewalExtensionRefusal(rule: "the subscription is \(status): only an active subscription can be extended (SubscriptionExtensionIneligibleError 4030004)")
        case "billingRetry", "gracePeriod":
            throw RenewalExtensionRefusal(rule: "the subscription is in billing retry (\(status)): Apple does not extend it (SubscriptionExtensionIneligibleError 4030004)")
        default: break
        }
        if offerDiscountType == "FREE_TRIAL" || (offerType != nil && offerDiscountType == nil && offerType == 1) {
            throw RenewalExtensionRefusal(rule: "the subscription is in a free offer period: Apple does not extend it (SubscriptionExtensionIneligibleError 4030004)")
        }
        if extensionsInLastYear >= maximumPerYear {
            throw RenewalExtensionRefusal(rule: "the subscription was extended \(extensionsInLastYear) times in the last 365 days: Apple allows two (SubscriptionMaxExtensionError 4030005)")
        }
    }
}

/// [ExtendRenewalDateResponse](https://developer.apple.com/documentation/appstoreserverapi/extendrenewaldateresponse).
public struct ExtendRenewalDateResponse: Sendable, Hashable, Decodable {
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var success: Bool
    /// The new renewal date (milliseconds).
    public var effectiveDate: Timestamp?
}

/// [MassExtendRenewalDateResponse](https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldateresponse).
public struct MassExtendRenewalDateResponse: Sendable, Hashable, Decodable {
    public var requestIdentifier: String
}

/// [MassExtendRenewalDateStatusResponse](https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldatestatusresponse).
public struct MassExtendRenewalDateStatusResponse: Sendable, Hashable, Decodable {
    public var requestIdentifier: String?
    public var complete: Bool?
    public var completeDate: Timestamp?
    public var succeededCount: Int64?
    public var failedCount: Int64?
}

/// [AppTransactionInfoResponse](https://developer.apple.com/documentation/appstoreserverapi/apptransactioninforesponse).
public struct AppTransactionInfoResponse: Sendable, Hashable, Decodable {
    public var signedAppTransactionInfo: String
}
