import Foundation

/// What the pipeline holds about one customer in one subscription group, as the decisions read it: every
/// transaction (family-shared included), each subscription's current state, the billing issues seen, and the offer
/// signatures already issued. The store gathers it; the decisions are pure.
public struct CustomerOfferHistory: Sendable {
    public struct Transaction: Sendable, Hashable {
        public var transactionId: String
        public var originalTransactionId: String
        public var productId: String
        public var purchaseDate: Date
        /// Apple's `offerType`: 1 introductory, 2 promotional, 3 offer code, 4 win-back.
        public var offerType: Int?
        public var offerIdentifier: String?
        /// `PURCHASED` or `FAMILY_SHARED`.
        public var ownershipType: String?
        public var revoked: Bool

        public init(
            transactionId: String, originalTransactionId: String, productId: String, purchaseDate: Date, offerType: Int? = nil, offerIdentifier: String? = nil,
            ownershipType: String? = "PURCHASED", revoked: Bool = false
        ) {
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.productId = productId
            self.purchaseDate = purchaseDate
            self.offerType = offerType
            self.offerIdentifier = offerIdentifier
            self.ownershipType = ownershipType
            self.revoked = revoked
        }
    }

    public struct Subscription: Sendable, Hashable {
        public var originalTransactionId: String
        public var productId: String
        /// The entitlement's status: active, gracePeriod, billingRetry, expired, refunded, revoked.
        public var status: String
        public var expiresAt: Date?

        public init(originalTransactionId: String, productId: String, status: String, expiresAt: Date?) {
            self.originalTransactionId = originalTransactionId
            self.productId = productId
            self.status = status
            self.expiresAt = expiresAt
        }
    }

    public var subscriptionGroupIdentifier: String
    public var transactions: [Transaction]
    public var subscriptions: [Subscription]
    /// When billing failed (DID_FAIL_TO_RENEW, or a status of billing retry or grace), ever.
    public var billingIssues: [Date]
    /// Offer signatures issued to this customer: offer identifier and when.
    public var issued: [(offerIdentifier: String, at: Date)]

    public init(
        subscriptionGroupIdentifier: String, transactions: [Transaction], subscriptions: [Subscription], billingIssues: [Date] = [],
        issued: [(offerIdentifier: String, at: Date)] = []
    ) {
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.transactions = transactions
        self.subscriptions = subscriptions
        self.billingIssues = billingIssues
        self.issued = issued
    }
}

/// An offer an operator makes available, and to whom (`OFFER_RULES_FILE`, docs/offers.md).
public struct OfferRule: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Codable {
        /// A promotional offer for current or past subscribers.
        case promotional
        /// A win-back offer: only for subscribers whose subscription lapsed.
        case winBack
    }

    /// The offer identifier set up in App Store Connect.
    public var offer: String
    /// The product it applies to.
    public var product: String
    public var kind: Kind
    /// Only when no subscription of the group is active and the last one ended more than this many days ago.
    public var lapsedMoreThanDays: Int?
    /// Only to customers never in billing retry or grace.
    public var neverInBillingRetryOrGrace: Bool?
    /// At most once per this many days (signatures issued and offers redeemed both count).
    public var atMostOncePerDays: Int?
    /// Only while a subscription of the group is active (a promotional offer to keep a subscriber).
    public var requiresActive: Bool?

    public init(
        offer: String, product: String, kind: Kind, lapsedMoreThanDays: Int? = nil, neverInBillingRetryOrGrace: Bool? = nil, atMostOncePerDays: Int? = nil,
        requiresActive: Bool? = nil
    ) {
        self.offer = offer
        self.product = product
        self.kind = kind
        self.lapsedMoreThanDays = lapsedMoreThanDays
        self.neverInBillingRetryOrGrace = neverInBillingRetryOrGrace
        self.atMostOncePerDays = atMostOncePerDays
        self.requiresActive = requiresActive
    }
}

/// A decision and why: the rule that decided it and the facts it used.
public struct OfferDecision: Sendable, Hashable {
    public var eligible: Bool
    /// The rule that decided (`never-subscribed-in-group`, `lapsed-more-than-30-days`, …).
    public var rule: String
    /// The facts it used, as text an operator reads (`transaction 2000000000000001 (introductory offer) on 2026-01-02`).
    public var facts: [String]
}

public enum OfferEligibility {
    static let day: TimeInterval = 86_400

    /// Apple grants an introductory offer once per subscription group: a customer who ever subscribed in the group
    /// (any product, any ownership, family sharing included, refunded or not) is not eligible. We hold their history,
    /// so we can say it before StoreKit does, and sign it (`introductoryOfferEligibility`).
    public static func introductoryOffer(_ history: CustomerOfferHistory) -> OfferDecision {
        let sorted = history.transactions.sorted { $0.purchaseDate < $1.purchaseDate }
        if let intro = sorted.first(where: { $0.offerType == 1 }) {
            return OfferDecision(eligible: false, rule: "introductory-offer-used-in-group", facts: [describe(intro, group: history.subscriptionGroupIdentifier)])
        }
        if let first = sorted.first {
            return OfferDecision(eligible: false, rule: "subscribed-before-in-group", facts: [describe(first, group: history.subscriptionGroupIdentifier)])
        }
        return OfferDecision(eligible: true, rule: "never-subscribed-in-group", facts: ["no transaction in group \(history.subscriptionGroupIdentifier)"])
    }

    /// Whether `rule`'s offer may be signed for this customer now. Built in, whatever the rule says: no win-back
    /// offer while a subscription of the group is active, in billing retry or in grace (Apple shows win-back offers to
    /// lapsed subscribers; one in billing retry still has a subscription to recover).
    public static func offer(_ rule: OfferRule, history: CustomerOfferHistory, now: Date) -> OfferDecision {
        // An "active" row whose period ended with no notification since is lapsed (the view's is_active says the same).
        let current = history.subscriptions.filter {
            ["gracePeriod", "billingRetry"].contains($0.status) || ($0.status == "active" && ($0.expiresAt.map { $0 > now } ?? true))
        }
        let inTrouble = history.subscriptions.filter { $0.status == "gracePeriod" || $0.status == "billingRetry" }
        if rule.kind == .winBack, let subscription = inTrouble.first ?? current.first {
            return OfferDecision(
                eligible: false, rule: subscription.status == "active" ? "win-back-needs-a-lapsed-subscription" : "win-back-never-in-billing-retry-or-grace",
                facts: ["subscription \(subscription.originalTransactionId) is \(subscription.status)"])
        }
        if rule.requiresActive == true, !current.contains(where: { $0.status == "active" }) {
            return OfferDecision(eligible: false, rule: "requires-an-active-subscription", facts: history.subscriptions.map { "subscription \($0.originalTransactionId) is \($0.status)" })
        }
        if history.transactions.isEmpty, rule.kind == .winBack || rule.lapsedMoreThanDays != nil {
            return OfferDecision(eligible: false, rule: "never-subscribed-in-group", facts: ["no transaction in group \(history.subscriptionGroupIdentifier)"])
        }
        if let days = rule.lapsedMoreThanDays {
            if let subscription = current.first {
                return OfferDecision(eligible: false, rule: "lapsed-more-than-\(days)-days", facts: ["subscription \(subscription.originalTransactionId) is \(subscription.status)"])
            }
            let lastEnd = history.subscriptions.compactMap(\.expiresAt).max()
            guard let lastEnd, now.timeIntervalSince(lastEnd) > Double(days) * day else {
                return OfferDecision(
                    eligible: false, rule: "lapsed-more-than-\(days)-days", facts: [lastEnd.map { "the last subscription ended \(date($0))" } ?? "no end date held"])
            }
        }
        if rule.neverInBillingRetryOrGrace == true, let issue = history.billingIssues.max() {
            return OfferDecision(eligible: false, rule: "never-in-billing-retry-or-grace", facts: ["billing failed \(date(issue))"])
        }
        if let days = rule.atMostOncePerDays {
            let since = now.addingTimeInterval(-Double(days) * day)
            if let issued = history.issued.filter({ $0.offerIdentifier == rule.offer && $0.at > since }).map(\.at).max() {
                return OfferDecision(eligible: false, rule: "at-most-once-per-\(days)-days", facts: ["offer \(rule.offer) signed \(date(issued))"])
            }
            if let redeemed = history.transactions.filter({ $0.offerIdentifier == rule.offer && $0.purchaseDate > since }).max(by: { $0.purchaseDate < $1.purchaseDate }) {
                return OfferDecision(eligible: false, rule: "at-most-once-per-\(days)-days", facts: [describe(redeemed, group: history.subscriptionGroupIdentifier)])
            }
        }
        var facts: [String] = []
        if let last = history.subscriptions.max(by: { ($0.expiresAt ?? .distantPast) < ($1.expiresAt ?? .distantPast) }) {
            facts.append("subscription \(last.originalTransactionId) is \(last.status)" + (last.expiresAt.map { ", ends \(date($0))" } ?? ""))
        }
        return OfferDecision(eligible: true, rule: "every-condition-of-\(rule.offer)-holds", facts: facts)
    }

    static func describe(_ transaction: CustomerOfferHistory.Transaction, group: String) -> String {
        let offer = switch transaction.offerType {
        case 1: " (introductory offer)"
        case 2: " (promotional offer \(transaction.offerIdentifier ?? "?"))"
        case 3: " (offer code)"
        case 4: " (win-back offer \(transaction.offerIdentifier ?? "?"))"
        default: ""
        }
        let shared = transaction.ownershipType == "FAMILY_SHARED" ? ", family shared" : ""
        let revoked = transaction.revoked ? ", refunded" : ""
        return "transaction \(transaction.transactionId) of \(transaction.productId) in group \(group) on \(date(transaction.purchaseDate))\(offer)\(shared)\(revoked)"
    }

    static func date(_ date: Date) -> String { date.formatted(.iso8601.year().month().day()) }
}
