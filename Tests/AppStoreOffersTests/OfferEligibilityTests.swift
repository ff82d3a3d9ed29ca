import AppStoreOffers
import Foundation
import Testing

/// Decisions on a fixture of customers, against a table: never subscribed, trial used in the group, lapsed, in
/// grace, in billing retry, family shared, refunded.
@Suite("Offer eligibility from the history we hold")
struct OfferEligibilityTests {
    static let now = Date(timeIntervalSince1970: 1_790_000_000)
    static func daysAgo(_ days: Double) -> Date { now.addingTimeInterval(-days * 86_400) }
    static let group = "21000001"

    static func transaction(_ id: String, days: Double, offerType: Int? = nil, offer: String? = nil, shared: Bool = false, revoked: Bool = false) -> CustomerOfferHistory.Transaction {
        .init(
            transactionId: id, originalTransactionId: "o" + id, productId: "monthly", purchaseDate: daysAgo(days), offerType: offerType, offerIdentifier: offer,
            ownershipType: shared ? "FAMILY_SHARED" : "PURCHASED", revoked: revoked)
    }

    static func subscription(_ id: String, _ status: String, endedDaysAgo: Double) -> CustomerOfferHistory.Subscription {
        .init(originalTransactionId: "o" + id, productId: "monthly", status: status, expiresAt: daysAgo(endedDaysAgo))
    }

    static let customers: [String: CustomerOfferHistory] = [
        "never subscribed": .init(subscriptionGroupIdentifier: group, transactions: [], subscriptions: []),
        "trial used": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("1", days: 20, offerType: 1)], subscriptions: [subscription("1", "active", endedDaysAgo: -10)]),
        "lapsed 45 days": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("2", days: 105), transaction("3", days: 75)], subscriptions: [subscription("2", "expired", endedDaysAgo: 45)]),
        "lapsed 10 days": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("4", days: 40)], subscriptions: [subscription("4", "expired", endedDaysAgo: 10)]),
        "in grace": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("5", days: 31)], subscriptions: [subscription("5", "gracePeriod", endedDaysAgo: 1)],
            billingIssues: [daysAgo(1)]),
        "in billing retry": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("6", days: 35)], subscriptions: [subscription("6", "billingRetry", endedDaysAgo: 5)],
            billingIssues: [daysAgo(5)]),
        "family shared": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("7", days: 60, shared: true)], subscriptions: [subscription("7", "expired", endedDaysAgo: 40)]),
        "refunded": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("8", days: 90, offerType: 1, revoked: true)], subscriptions: [subscription("8", "refunded", endedDaysAgo: 85)]),
        "lapsed after billing trouble": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("9", days: 120)], subscriptions: [subscription("9", "expired", endedDaysAgo: 60)],
            billingIssues: [daysAgo(62)]),
        "won back 100 days ago": .init(
            subscriptionGroupIdentifier: group, transactions: [transaction("10", days: 300), transaction("11", days: 100, offerType: 4, offer: "winback_50")],
            subscriptions: [subscription("10", "expired", endedDaysAgo: 70)]),
    ]

    static let winBack = OfferRule(offer: "winback_50", product: "monthly", kind: .winBack, lapsedMoreThanDays: 30, neverInBillingRetryOrGrace: true, atMostOncePerDays: 180)
    static let loyalty = OfferRule(offer: "loyal_3m", product: "monthly", kind: .promotional, requiresActive: true)

    /// customer → (intro eligible, its rule; win-back eligible, its rule; loyalty eligible)
    static let table: [String: (Bool, String, Bool, String, Bool)] = [
        "never subscribed": (true, "never-subscribed-in-group", false, "never-subscribed-in-group", false),
        "trial used": (false, "introductory-offer-used-in-group", false, "win-back-needs-a-lapsed-subscription", true),
        "lapsed 45 days": (false, "subscribed-before-in-group", true, "every-condition-of-winback_50-holds", false),
        "lapsed 10 days": (false, "subscribed-before-in-group", false, "lapsed-more-than-30-days", false),
        "in grace": (false, "subscribed-before-in-group", false, "win-back-never-in-billing-retry-or-grace", false),
        "in billing retry": (false, "subscribed-before-in-group", false, "win-back-never-in-billing-retry-or-grace", false),
        "family shared": (false, "subscribed-before-in-group", true, "every-condition-of-winback_50-holds", false),
        "refunded": (false, "introductory-offer-used-in-group", true, "every-condition-of-winback_50-holds", false),
        "lapsed after billing trouble": (false, "subscribed-before-in-group", false, "never-in-billing-retry-or-grace", false),
        "won back 100 days ago": (false, "subscribed-before-in-group", false, "at-most-once-per-180-days", false),
    ]

    @Test("every fixture customer's decisions match the table, each with the rule that decided and its facts", arguments: table.keys.sorted())
    func decisions(customer: String) throws {
        let history = try #require(Self.customers[customer])
        let expected = try #require(Self.table[customer])
        let intro = OfferEligibility.introductoryOffer(history)
        #expect(intro.eligible == expected.0 && intro.rule == expected.1, "\(customer): intro \(intro)")
        #expect(!intro.facts.isEmpty)
        let winBack = OfferEligibility.offer(Self.winBack, history: history, now: Self.now)
        #expect(winBack.eligible == expected.2 && winBack.rule == expected.3, "\(customer): win-back \(winBack)")
        let loyalty = OfferEligibility.offer(Self.loyalty, history: history, now: Self.now)
        #expect(loyalty.eligible == expected.4, "\(customer): loyalty \(loyalty)")
    }

    @Test("a signature issued within the window counts like a redemption")
    func issuedCounts() {
        var history = Self.customers["lapsed 45 days"]!
        #expect(OfferEligibility.offer(Self.winBack, history: history, now: Self.now).eligible)
        history.issued = [("winback_50", Self.daysAgo(3))]
        let decision = OfferEligibility.offer(Self.winBack, history: history, now: Self.now)
        #expect(!decision.eligible && decision.rule == "at-most-once-per-180-days" && decision.facts.first?.contains("signed") == true)
    }

    @Test("the family-shared and refunded facts are named in the reasons")
    func factsNameOwnership() {
        #expect(OfferEligibility.introductoryOffer(Self.customers["family shared"]!).facts.first?.contains("family shared") == true)
        #expect(OfferEligibility.introductoryOffer(Self.customers["refunded"]!).facts.first?.contains("refunded") == true)
    }
}
