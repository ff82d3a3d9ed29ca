import AppStoreNotifications
import Crypto
import Foundation

/// Signs what StoreKit takes from a server to apply an offer, exactly as Apple's App Store Server Library creates it
/// (`PromotionalOfferV2SignatureCreator`, `IntroductoryOfferEligibilitySignatureCreator`, `PromotionalOfferSignatureCreator`),
/// with the app's In-App Purchase key (App Store Connect → Users and Access → Integrations → In-App Purchase; the
/// App Store Server API key is one). docs/offers.md says how StoreKit takes each.
///
/// The JWS forms: header `{"alg":"ES256","kid":…,"typ":"JWT"}`; claims the feature's (`productId`, …), then `bid`,
/// `iss`, `aud`, `iat` (seconds), `nonce` (a new lowercase UUID each time); signature `r‖s`, base64url.
public struct OfferSignatureCreator: Sendable {
    /// Apple's audiences, exactly.
    public static let promotionalOfferAudience = "promotional-offer"
    public static let introductoryOfferEligibilityAudience = "introductory-offer-eligibility"

    public let keyId: String
    public let issuerId: String
    public let bundleId: String
    let signingKey: P256.Signing.PrivateKey
    let now: @Sendable () -> Date
    let nonce: @Sendable () -> UUID

    public init(
        keyId: String, issuerId: String, bundleId: String, signingKey: P256.Signing.PrivateKey, now: @escaping @Sendable () -> Date = Date.init,
        nonce: @escaping @Sendable () -> UUID = UUID.init
    ) {
        self.keyId = keyId
        self.issuerId = issuerId
        self.bundleId = bundleId
        self.signingKey = signingKey
        self.now = now
        self.nonce = nonce
    }

    /// A signature with what it was made of: the nonce and time go to the ledger (`offer_signatures`).
    public struct Signed: Sendable, Hashable {
        /// The JWS (V2 forms) or the base64 signature (V1).
        public var signature: String
        /// Lowercase, as in the claims.
        public var nonce: String
        /// `iat` (seconds) for the JWS forms; the V1 timestamp (milliseconds) for V1.
        public var issuedAt: Int64
    }

    /// [Promotional offer V2](https://developer.apple.com/documentation/storekit/generating-jws-to-sign-app-store-requests):
    /// StoreKit's `Product.PurchaseOption.promotionalOffer(_:compactJWS:)`. `transactionId` (any of the customer's, or
    /// their appTransactionId) is optional but recommended.
    public func promotionalOfferV2(productId: String, offerIdentifier: String, transactionId: String?) -> Signed {
        var claims = JSONObject(["productId": .string(productId), "offerIdentifier": .string(offerIdentifier)])
        if let transactionId { claims["transactionId"] = .string(transactionId) }
        return sign(claims, audience: Self.promotionalOfferAudience)
    }

    /// [Introductory offer eligibility](https://developer.apple.com/documentation/storekit/generating-jws-to-sign-app-store-requests):
    /// StoreKit's `Product.PurchaseOption.introductoryOfferEligibility(compactJWS:)`, overriding the App Store's own
    /// decision for this purchase.
    public func introductoryOfferEligibility(productId: String, allowIntroductoryOffer: Bool, transactionId: String) -> Signed {
        sign(
            JSONObject(["productId": .string(productId), "allowIntroductoryOffer": .bool(allowIntroductoryOffer), "transactionId": .string(transactionId)]),
            audience: Self.introductoryOfferEligibilityAudience)
    }

    /// [The original promotional offer signature](https://developer.apple.com/documentation/storekit/generating-a-signature-for-promotional-offers)
    /// for clients before StoreKit's JWS form: ECDSA P-256 SHA-256 over `bundleId ⁣ keyId ⁣ productId ⁣ offerId ⁣
    /// applicationUsername ⁣ nonce ⁣ timestamp` (joined by U+2063, the username and nonce lowercased), DER, base64.
    /// The offer is valid for 24 hours from `timestamp` (milliseconds).
    public func promotionalOfferV1(productIdentifier: String, subscriptionOfferId: String, applicationUsername: String, nonce: UUID, timestamp: Int64) -> Signed {
        let nonceText = nonce.uuidString.lowercased()
        let payload = Self.v1Payload(
            bundleId: bundleId, keyId: keyId, productIdentifier: productIdentifier, subscriptionOfferId: subscriptionOfferId,
            applicationUsername: applicationUsername, nonce: nonceText, timestamp: timestamp)
        // Signing with a valid in-memory P-256 key does not fail.
        let der = (try? signingKey.signature(for: Array(payload.utf8)))?.derRepresentation ?? Data()
        return Signed(signature: Base64.encode(Array(der), alphabet: .standard), nonce: nonceText, issuedAt: timestamp)
    }

    /// The text the V1 signature covers.
    public static func v1Payload(
        bundleId: String, keyId: String, productIdentifier: String, subscriptionOfferId: String, applicationUsername: String, nonce: String, timestamp: Int64
    ) -> String {
        [bundleId, keyId, productIdentifier, subscriptionOfferId, applicationUsername.lowercased(), nonce.lowercased(), String(timestamp)]
            .joined(separator: "\u{2063}")
    }

    func sign(_ featureClaims: JSONObject, audience: String) -> Signed {
        var claims = featureClaims
        let issuedAt = Int64(now().timeIntervalSince1970)
        let nonceText = nonce().uuidString.lowercased()
        claims["bid"] = .string(bundleId)
        claims["iss"] = .string(issuerId)
        claims["aud"] = .string(audience)
        claims["iat"] = .number(JSONNumber(issuedAt))
        claims["nonce"] = .string(nonceText)
        let header = JSONObject(["alg": .string("ES256"), "kid": .string(keyId), "typ": .string("JWT")])
        let signingInput = Base64.encode(Array(JSONValue.object(header).serialized.utf8), alphabet: .url) + "."
            + Base64.encode(Array(JSONValue.object(claims).serialized.utf8), alphabet: .url)
        let signature = (try? signingKey.signature(for: Array(signingInput.utf8)))?.rawRepresentation ?? Data()
        return Signed(signature: signingInput + "." + Base64.encode(Array(signature), alphabet: .url), nonce: nonceText, issuedAt: issuedAt)
    }
}
