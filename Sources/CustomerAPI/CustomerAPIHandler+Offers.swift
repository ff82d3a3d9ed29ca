import AppStoreNotifications
import AppStoreOffers
import Foundation

extension CustomerAPIHandler {
    /// `POST /v1/apps/{bundleId}/customers/{customerId}/offers` (docs/offers.md): the decisions from the customer's
    /// history in the product's group, the introductory-offer eligibility JWS, and the chosen promotional offer's
    /// JWS; every signature recorded in the ledger. Read on the primary: a decision right after a purchase must see it.
    func decideOffers(_ input: Operations.DecideOffers.Input) async throws -> Operations.DecideOffers.Output {
        let bundleId = input.path.bundleId
        guard case .json(let request) = input.body else { throw CustomerAPIError(400, "invalid_request", "send application/json") }
        guard let customerId = CustomerId.canonical(input.path.customerId) else {
            throw CustomerAPIError(400, "invalid_customer_id", "customerId must be a UUID (the app's user id as an appAccountToken)")
        }
        guard let key = appStore.values.first?.configuration else {
            throw CustomerAPIError(
                503, "offers_not_configured", "no In-App Purchase key is configured (APPSTORE_KEY_ID, APPSTORE_ISSUER_ID, APPSTORE_PRIVATE_KEY_FILE)",
                headers: ["Retry-After": "60"])
        }
        let environment = request.environment?.rawValue ?? "Production"
        let productId = request.productId
        let rules = (configuration.offerRules[bundleId] ?? []).filter { $0.product == productId }
        if let wanted = request.offerIdentifier, !rules.contains(where: { $0.offer == wanted }) {
            throw CustomerAPIError(400, "unknown_offer", "no rule of OFFER_RULES_FILE offers \(wanted) for this product of this app")
        }
        let subscriptions = try await store.customer(bundleId: bundleId, customerId: customerId, environment: environment).subscriptions
        var group = request.subscriptionGroupIdentifier
        if group == nil { group = try await store.subscriptionGroup(bundleId: bundleId, productId: productId, subscriptions: subscriptions) }
        guard let group else {
            throw CustomerAPIError(404, "unknown_subscription_group", "no transaction of this product is held: send subscriptionGroupIdentifier")
        }
        let history = try await store.offerHistory(bundleId: bundleId, customerId: customerId, group: group, subscriptions: subscriptions, environment: environment)
        let now = Date()
        let intro = OfferEligibility.introductoryOffer(history)
        let options = rules.map { ($0, OfferEligibility.offer($0, history: history, now: now)) }
        let creator = OfferSignatureCreator(keyId: key.keyId, issuerId: key.issuerId, bundleId: bundleId, signingKey: key.signingKey)
        // The signatures name a transaction of the customer: the one given, else their latest in the group, else their app transaction.
        let latest: String? = history.transactions.max { $0.purchaseDate < $1.purchaseDate }?.transactionId
        let appTransaction: String? = subscriptions.compactMap(\.appTransactionId).first
        let transactionId: String? = request.transactionId ?? latest ?? appTransaction
        var introSignature: Components.Schemas.SignedOffer?
        if let transactionId {
            let signed = creator.introductoryOfferEligibility(productId: productId, allowIntroductoryOffer: intro.eligible, transactionId: transactionId)
            try await store.recordOfferSignature(
                signed, kind: "introductory-offer-eligibility", environment: environment, bundleId: bundleId, customerId: customerId, productId: productId,
                offerIdentifier: nil, transactionId: transactionId, rule: intro.rule)
            introSignature = .init(kind: .introductoryOfferEligibility, jws: signed.signature, nonce: signed.nonce, issuedAt: signed.issuedAt)
            metrics.offer("introductory-offer-eligibility", outcome: "issued", reason: intro.rule)
        }
        let chosen = request.offerIdentifier.flatMap { wanted in options.first { $0.0.offer == wanted } } ?? options.first { $0.1.eligible }
        var signedOffer: Components.Schemas.SignedOffer?
        if let (rule, decision) = chosen {
            if decision.eligible {
                let signed = try await signPromotionalOffer(
                    creator, environment: environment, bundleId: bundleId, customerId: customerId, productId: productId, offerIdentifier: rule.offer,
                    transactionId: transactionId, rule: decision.rule)
                signedOffer = .init(kind: .promotionalOffer, offerIdentifier: rule.offer, jws: signed.signature, nonce: signed.nonce, issuedAt: signed.issuedAt)
                metrics.offer("promotional-offer", outcome: "issued", reason: decision.rule)
            } else {
                metrics.offer("promotional-offer", outcome: "refused", reason: decision.rule)
            }
        }
        func schema(_ decision: OfferDecision) -> Components.Schemas.OfferDecision { .init(eligible: decision.eligible, rule: decision.rule, facts: decision.facts) }
        return .ok(.init(body: .json(.init(
            customerId: customerId, productId: productId, subscriptionGroupIdentifier: group, introductoryOffer: schema(intro),
            introductoryOfferSignature: introSignature,
            offers: options.map { option -> Components.Schemas.OfferOption in
                let kind: Components.Schemas.OfferOption.KindPayload = option.0.kind == .winBack ? .winBack : .promotional
                return Components.Schemas.OfferOption(offerIdentifier: option.0.offer, kind: kind, decision: schema(option.1))
            },
            signed: signedOffer))))
    }

    /// A promotional offer's signature (V2), written to the nonce ledger before it is answered: an offer we could not
    /// record is an offer we could not trace, so a failure to record it is the caller's failure to give it. The
    /// offers decision and Apple's real-time retention request both give offers through here.
    func signPromotionalOffer(
        _ creator: OfferSignatureCreator, environment: String, bundleId: String, customerId: String, productId: String, offerIdentifier: String,
        transactionId: String?, rule: String
    ) async throws -> OfferSignatureCreator.Signed {
        let signed = creator.promotionalOfferV2(productId: productId, offerIdentifier: offerIdentifier, transactionId: transactionId)
        try await store.recordOfferSignature(
            signed, kind: "promotional-offer", environment: environment, bundleId: bundleId, customerId: customerId, productId: productId,
            offerIdentifier: offerIdentifier, transactionId: transactionId, rule: rule)
        return signed
    }
}
