import AppStoreNotifications
import AppStoreOffers
import EntitlementStore
import Foundation

extension CustomerAPIHandler {
    /// How long the subscription's lookup may take before the answer is "no message": Apple waits about a second.
    static let retentionLookupDeadline: Duration = .milliseconds(400)

    /// `POST /v1/apps/{bundleId}/retention`: Apple's Get Retention Message request (docs/offers.md). A request that
    /// does not verify is refused (401 with the verifier's reason); one that verifies is answered with the app's first
    /// rule for the subscription's state, or with no message on any doubt, counted by reason.
    func getRetentionMessage(_ input: Operations.GetRetentionMessage.Input) async throws -> Operations.GetRetentionMessage.Output {
        let bundleId = input.path.bundleId
        guard configuration.shared.apps.contains(where: { $0.bundleId == bundleId }) else {
            throw CustomerAPIError(403, "forbidden_bundle", "this app is not one of APPS")
        }
        guard case .json(let body) = input.body else { throw CustomerAPIError(400, "invalid_request", "send application/json") }
        let request: VerifiedRealtimeRequest
        do {
            request = try await verifier.verifyRealtimeRequest(body.signedPayload, bundleId: bundleId)
        } catch {
            metrics.retention(answer: "refused", reason: error.code)
            if error.isTransient { throw CustomerAPIError(503, "unavailable", error.reason, headers: ["Retry-After": "1"]) }
            throw CustomerAPIError(401, error.code, error.reason)
        }
        func none(_ reason: String) -> Operations.GetRetentionMessage.Output {
            metrics.retention(answer: "none", reason: reason)
            logger.info("retention request answered with no message", metadata: ["reason": "\(reason)", "requestIdentifier": "\(request.requestIdentifier)"])
            return .ok(.init(body: .json(.init())))
        }
        guard let rules = configuration.retentionRules[bundleId], !rules.isEmpty else { return none("no-rules") }
        let rows: [CustomerSubscriptionRow]
        do {
            let (store, otid, environment) = (store, request.originalTransactionId, request.environment.rawValue)
            rows = try await withDeadline(Self.retentionLookupDeadline, "the subscription's lookup") {
                try await store.subscriptions(bundleId: bundleId, originalTransactionId: otid, environment: environment)
            }
        } catch {
            return none("lookup-failed")
        }
        guard let row = rows.first else { return none("unknown-subscription") }
        // A row still "active" past its period's end (no notification since) has lapsed.
        let status = row.status == "active" && !row.isActive ? "expired" : row.status
        guard let (answer, rule) = RetentionMessages.answer(rules: rules, status: status, productId: request.productId ?? row.productId) else {
            return none("no-rule-for-\(status)")
        }
        let response: Components.Schemas.RealtimeResponseBody
        switch answer {
        case .message(let message):
            response = .init(message: .init(messageIdentifier: message))
        case .alternateProduct(let message, let productId):
            response = .init(alternateProduct: .init(messageIdentifier: message, productId: productId))
        case .promotionalOffer(let message, let offer):
            guard let key = appStore.values.first?.configuration else { return none("no-signing-key") }
            let productId = request.productId ?? row.productId ?? ""
            let creator = OfferSignatureCreator(keyId: key.keyId, issuerId: key.issuerId, bundleId: bundleId, signingKey: key.signingKey)
            let signed: OfferSignatureCreator.Signed
            do {
                signed = try await signPromotionalOffer(
                    creator, environment: request.environment.rawValue, bundleId: bundleId, customerId: row.customerId ?? request.originalTransactionId,
                    productId: productId, offerIdentifier: offer, transactionId: request.originalTransactionId, rule: "retention-rule-\(rule + 1)")
            } catch {
                // An offer we could not record is an offer we could not trace: not given.
                return none("ledger-failed")
            }
            response = .init(promotionalOffer: .init(messageIdentifier: message, promotionalOfferSignatureV2: signed.signature))
        }
        metrics.retention(answer: answer.kind, reason: "rule-\(rule + 1)")
        return .ok(.init(body: .json(response)))
    }
}

extension RetentionAnswer {
    var kind: String {
        switch self {
        case .message: "message"
        case .alternateProduct: "alternate-product"
        case .promotionalOffer: "promotional-offer"
        }
    }
}
