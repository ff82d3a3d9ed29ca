import Foundation

/// One of the app's retention rules (`RETENTION_RULES_FILE`, docs/offers.md): for a subscription in one of `status`
/// (and of `productId`, when set), which retention message the App Store shows when the subscriber is about to cancel.
/// Exactly one answer: a message alone, a message with a switch-plan `alternateProduct`, or a message with a
/// `promotionalOffer` (signed as a promotional offer V2 when answered).
public struct RetentionRule: Sendable, Hashable, Codable {
    /// The entitlement states it applies to: active, gracePeriod, billingRetry, expired, … (any when absent).
    public var status: [String]?
    public var productId: String?
    /// The message's identifier in Apple's Retention Messaging API (a UUID, uploaded and approved).
    public var message: String
    public var alternateProduct: String?
    public var promotionalOffer: String?

    public init(status: [String]? = nil, productId: String? = nil, message: String, alternateProduct: String? = nil, promotionalOffer: String? = nil) {
        self.status = status
        self.productId = productId
        self.message = message
        self.alternateProduct = alternateProduct
        self.promotionalOffer = promotionalOffer
    }

    /// Why the rule cannot be used, or nil.
    public var problem: String? {
        if UUID(uuidString: message) == nil { return "message \(message) is not a UUID (Apple's message identifiers are)" }
        if alternateProduct != nil, promotionalOffer != nil { return "a rule answers a switch-plan product or a promotional offer, not both" }
        return nil
    }
}

/// What the App Store is answered (Apple's `RealtimeResponseBody`: one of its fields, or none).
public enum RetentionAnswer: Sendable, Hashable {
    case message(messageIdentifier: String)
    case alternateProduct(messageIdentifier: String, productId: String)
    case promotionalOffer(messageIdentifier: String, offerIdentifier: String)
}

public enum RetentionMessages {
    /// The first rule for the subscription's state and product, with the rule's position as the reason; nil (no
    /// message: "no answer is better than a wrong one") when none applies.
    public static func answer(rules: [RetentionRule], status: String, productId: String?) -> (answer: RetentionAnswer, rule: Int)? {
        for (index, rule) in rules.enumerated() where rule.problem == nil {
            if let states = rule.status, !states.contains(status) { continue }
            if let product = rule.productId, product != productId { continue }
            if let alternate = rule.alternateProduct { return (.alternateProduct(messageIdentifier: rule.message.lowercased(), productId: alternate), index) }
            if let offer = rule.promotionalOffer { return (.promotionalOffer(messageIdentifier: rule.message.lowercased(), offerIdentifier: offer), index) }
            return (.message(messageIdentifier: rule.message.lowercased()), index)
        }
        return nil
    }
}
