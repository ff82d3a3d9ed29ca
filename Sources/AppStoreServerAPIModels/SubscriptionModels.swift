import AppStoreNotifications
/// [lastTransactionsItem](https://developer.apple.com/documentation/appstoreserverapi/lasttransactionsitem):
/// a subscription's status (kept raw: a value Apple adds later is carried) and its latest signed transaction and
/// renewal info.
public struct LastTransactionsItem: Sendable, Hashable, Decodable {
    public var status: Int32?
    public var originalTransactionId: String?
    public var signedTransactionInfo: String?
    public var signedRenewalInfo: String?
}

/// [SubscriptionGroupIdentifierItem](https://developer.apple.com/documentation/appstoreserverapi/subscriptiongroupidentifieritem)
public struct SubscriptionGroupIdentifierItem: Sendable, Hashable, Decodable {
    public var subscriptionGroupIdentifier: String?
    public var lastTransactions: [LastTransactionsItem]

    enum CodingKeys: String, CodingKey { case subscriptionGroupIdentifier, lastTransactions }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        subscriptionGroupIdentifier = try container.decodeIfPresent(String.self, forKey: .subscriptionGroupIdentifier)
        lastTransactions = try container.decodeIfPresent([LastTransactionsItem].self, forKey: .lastTransactions) ?? []
    }
}

/// [StatusResponse](https://developer.apple.com/documentation/appstoreserverapi/statusresponse): Get All
/// Subscription Statuses, grouped by subscription group.
public struct StatusResponse: Sendable, Hashable, Decodable {
    public var environment: String?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var data: [SubscriptionGroupIdentifierItem]

    enum CodingKeys: String, CodingKey { case environment, bundleId, appAppleId, data }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        environment = try container.decodeIfPresent(String.self, forKey: .environment)
        bundleId = try container.decodeIfPresent(String.self, forKey: .bundleId)
        appAppleId = try container.decodeIfPresent(Int64.self, forKey: .appAppleId)
        data = try container.decodeIfPresent([SubscriptionGroupIdentifierItem].self, forKey: .data) ?? []
    }

    /// Every subscription in it as the document the workers verify (items without a signed transaction or
    /// status are left out and counted by the caller).
    public var snapshots: [StatusSnapshotDocument] {
        data.flatMap { group in
            group.lastTransactions.compactMap { item in
                guard let status = item.status, let original = item.originalTransactionId, let signed = item.signedTransactionInfo else { return nil }
                return StatusSnapshotDocument(
                    environment: environment ?? "", bundleId: bundleId ?? "", appAppleId: appAppleId, subscriptionGroupIdentifier: group.subscriptionGroupIdentifier,
                    status: status, originalTransactionId: original, signedTransactionInfo: signed, signedRenewalInfo: item.signedRenewalInfo)
            }
        }
    }
}

/// [HistoryResponse](https://developer.apple.com/documentation/appstoreserverapi/historyresponse): one page of
/// Get Transaction History v2.
public struct HistoryResponse: Sendable, Hashable, Decodable {
    /// The token for the next page, and (stored per customer) for asking only for what changed since.
    public var revision: String?
    public var hasMore: Bool
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environment: String?
    public var signedTransactions: [String]

    enum CodingKeys: String, CodingKey { case revision, hasMore, bundleId, appAppleId, environment, signedTransactions }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        revision = try container.decodeIfPresent(String.self, forKey: .revision)
        hasMore = try container.decodeIfPresent(Bool.self, forKey: .hasMore) ?? false
        bundleId = try container.decodeIfPresent(String.self, forKey: .bundleId)
        appAppleId = try container.decodeIfPresent(Int64.self, forKey: .appAppleId)
        environment = try container.decodeIfPresent(String.self, forKey: .environment)
        signedTransactions = try container.decodeIfPresent([String].self, forKey: .signedTransactions) ?? []
        if hasMore, revision?.isEmpty ?? true {
            throw DecodingError.keyNotFound(CodingKeys.revision, .init(codingPath: decoder.codingPath, debugDescription: "is missing although hasMore is true"))
        }
    }
}

/// The body of [Send Consumption Information](https://developer.apple.com/documentation/appstoreserverapi/send-consumption-information)
/// (v2), checked against Apple's rules before anything is sent.
public struct ConsumptionRequest: Sendable, Hashable {
    public static let deliveryStatuses: Set<String> = [
        "DELIVERED", "UNDELIVERED_QUALITY_ISSUE", "UNDELIVERED_WRONG_ITEM", "UNDELIVERED_SERVER_OUTAGE", "UNDELIVERED_OTHER",
    ]
    public static let refundPreferences: Set<String> = ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"]

    public var customerConsented: Bool
    public var deliveryStatus: String
    public var sampleContentProvided: Bool
    /// Milliunits: 0…100 000 (100 000 = all consumed).
    public var consumptionPercentage: Int64?
    public var refundPreference: String?

    public init(customerConsented: Bool, deliveryStatus: String, sampleContentProvided: Bool, consumptionPercentage: Int64? = nil, refundPreference: String? = nil) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }

    /// Apple's rules, each refusal in the rule's words; `productType` is the transaction's `type`.
    public func validate(productType: String?) throws(ConsumptionRuleViolation) {
        guard customerConsented else {
            throw ConsumptionRuleViolation(rule: "customerConsented must be true: Apple accepts consumption information only with the customer's consent")
        }
        guard Self.deliveryStatuses.contains(deliveryStatus) else {
            throw ConsumptionRuleViolation(rule: "deliveryStatus must be one of \(Self.deliveryStatuses.sorted().joined(separator: ", "))")
        }
        if let refundPreference, !Self.refundPreferences.contains(refundPreference) {
            throw ConsumptionRuleViolation(rule: "refundPreference must be one of \(Self.refundPreferences.sorted().joined(separator: ", "))")
        }
        if let consumptionPercentage {
            if productType == "Auto-Renewable Subscription" {
                throw ConsumptionRuleViolation(rule: "consumptionPercentage must be absent for an auto-renewable subscription")
            }
            guard (0...100_000).contains(consumptionPercentage) else {
                throw ConsumptionRuleViolation(rule: "consumptionPercentage is in milliunits: 0…100000 (100000 = fully consumed)")
            }
            guard deliveryStatus == "DELIVERED" || consumptionPercentage == 0 else {
                throw ConsumptionRuleViolation(rule: "consumptionPercentage must be 0 unless deliveryStatus is DELIVERED")
            }
        }
    }

    public var json: JSONObject {
        var object = JSONObject([
            "customerConsented": .bool(customerConsented), "deliveryStatus": .string(deliveryStatus), "sampleContentProvided": .bool(sampleContentProvided),
        ])
        if let consumptionPercentage { object["consumptionPercentage"] = .number(JSONNumber(consumptionPercentage)) }
        if let refundPreference { object["refundPreference"] = .string(refundPreference) }
        return object
    }
}

/// A consumption answer refused locally, before any request, with Apple's rule.
public struct ConsumptionRuleViolation: Error, Sendable, CustomStringConvertible {
    public var rule: String
    public var description: String { rule }
}
