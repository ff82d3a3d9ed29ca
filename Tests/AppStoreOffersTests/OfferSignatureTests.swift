import AppStoreNotifications
import AppStoreOffers
import Crypto
import Foundation
import Testing

/// The signatures StoreKit takes, held field by field to what Apple's App Store Server Library writes for the same
/// inputs (its `JWSSignatureCreator`: PyJWT with `headers={"kid": …}`, sorted header keys; claims the feature's, then
/// `bid`, `iss`, `aud`, `iat`, `nonce`), and verified with the key's public half.
@Suite("Offer signatures as Apple's library creates them")
struct OfferSignatureTests {
    static let key = P256.Signing.PrivateKey()
    static let creator = OfferSignatureCreator(
        keyId: "ABCDEFGHIJ", issuerId: "57246542-96fe-1a63-e053-0824d011072a", bundleId: "com.example.pipeline.app", signingKey: key,
        now: { Date(timeIntervalSince1970: 1_790_000_000.75) }, nonce: { UUID(uuidString: "E5A1C8B2-3C4D-4E5F-8A9B-0C1D2E3F4A5B")! })

    /// The three parts of a compact JWS, decoded; the signature checked with `key`'s public half.
    static func parts(_ jws: String, key: P256.Signing.PrivateKey = key) throws -> (header: JSONObject, claims: JSONObject, headerText: String) {
        let pieces = jws.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(pieces.count == 3)
        let headerBytes = try #require(Base64.decode(pieces[0], alphabet: .url))
        let claimsBytes = try #require(Base64.decode(pieces[1], alphabet: .url))
        let signature = try #require(Base64.decode(pieces[2], alphabet: .url))
        let valid = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        #expect(key.publicKey.isValidSignature(valid, for: Array((pieces[0] + "." + pieces[1]).utf8)), "the signature verifies with the public key")
        return (try StrictJSONParser().parseObject(headerBytes), try StrictJSONParser().parseObject(claimsBytes), String(decoding: headerBytes, as: UTF8.self))
    }

    @Test("promotional offer V2: header, claims and audience exactly as Apple's library; transactionId only when given")
    func promotionalV2() throws {
        let signed = Self.creator.promotionalOfferV2(productId: "com.example.monthly", offerIdentifier: "winback_50", transactionId: "2000000123456789")
        let (header, claims, headerText) = try Self.parts(signed.signature)
        #expect(headerText == #"{"alg":"ES256","kid":"ABCDEFGHIJ","typ":"JWT"}"#)
        #expect(header.keys == ["alg", "kid", "typ"])
        #expect(claims.keys == ["productId", "offerIdentifier", "transactionId", "bid", "iss", "aud", "iat", "nonce"])
        #expect(claims["aud"] == .string("promotional-offer"))
        #expect(claims["productId"] == .string("com.example.monthly") && claims["offerIdentifier"] == .string("winback_50"))
        #expect(claims["transactionId"] == .string("2000000123456789") && claims["bid"] == .string("com.example.pipeline.app"))
        #expect(claims["iss"] == .string("57246542-96fe-1a63-e053-0824d011072a") && claims["iat"] == .number(JSONNumber(1_790_000_000)))
        #expect(claims["nonce"] == .string("e5a1c8b2-3c4d-4e5f-8a9b-0c1d2e3f4a5b") && signed.nonce == "e5a1c8b2-3c4d-4e5f-8a9b-0c1d2e3f4a5b")
        let without = try Self.parts(Self.creator.promotionalOfferV2(productId: "p", offerIdentifier: "o", transactionId: nil).signature).claims
        #expect(without.keys == ["productId", "offerIdentifier", "bid", "iss", "aud", "iat", "nonce"])
    }

    @Test("introductory offer eligibility: audience introductory-offer-eligibility, allowIntroductoryOffer a JSON boolean")
    func introEligibility() throws {
        for allow in [true, false] {
            let (_, claims, headerText) = try Self.parts(
                Self.creator.introductoryOfferEligibility(productId: "com.example.yearly", allowIntroductoryOffer: allow, transactionId: "2000000000000001").signature)
            #expect(headerText == #"{"alg":"ES256","kid":"ABCDEFGHIJ","typ":"JWT"}"#)
            #expect(claims.keys == ["productId", "allowIntroductoryOffer", "transactionId", "bid", "iss", "aud", "iat", "nonce"])
            #expect(claims["aud"] == .string("introductory-offer-eligibility") && claims["allowIntroductoryOffer"] == .bool(allow))
        }
    }

    @Test("a new lowercase UUID nonce per signature by default")
    func nonces() throws {
        let creator = OfferSignatureCreator(keyId: "K", issuerId: "I", bundleId: "B", signingKey: Self.key)
        let nonces = (0..<20).map { _ in creator.promotionalOfferV2(productId: "p", offerIdentifier: "o", transactionId: nil).nonce }
        #expect(Set(nonces).count == 20 && nonces.allSatisfy { $0 == $0.lowercased() && UUID(uuidString: $0) != nil })
    }

    @Test("V1 promotional offer signature: DER ECDSA SHA-256 over the U+2063-joined fields, base64, as Apple's library")
    func promotionalV1() throws {
        let nonce = UUID(uuidString: "E5A1C8B2-3C4D-4E5F-8A9B-0C1D2E3F4A5B")!
        let signed = Self.creator.promotionalOfferV1(
            productIdentifier: "com.example.monthly", subscriptionOfferId: "winback_50", applicationUsername: "9F6E1D2C-AAAA-4BBB-8CCC-DDDDEEEEFFFF", nonce: nonce,
            timestamp: 1_790_000_000_123)
        let payload = "com.example.pipeline.app\u{2063}ABCDEFGHIJ\u{2063}com.example.monthly\u{2063}winback_50\u{2063}9f6e1d2c-aaaa-4bbb-8ccc-ddddeeeeffff\u{2063}e5a1c8b2-3c4d-4e5f-8a9b-0c1d2e3f4a5b\u{2063}1790000000123"
        #expect(OfferSignatureCreator.v1Payload(
            bundleId: "com.example.pipeline.app", keyId: "ABCDEFGHIJ", productIdentifier: "com.example.monthly", subscriptionOfferId: "winback_50",
            applicationUsername: "9F6E1D2C-AAAA-4BBB-8CCC-DDDDEEEEFFFF", nonce: "E5A1C8B2-3C4D-4E5F-8A9B-0C1D2E3F4A5B", timestamp: 1_790_000_000_123) == payload)
        let der = try #require(Base64.decode(signed.signature, alphabet: .standard))
        let signature = try P256.Signing.ECDSASignature(derRepresentation: der)
        #expect(Self.key.publicKey.isValidSignature(signature, for: Array(payload.utf8)))
        #expect(!Self.key.publicKey.isValidSignature(signature, for: Array((payload + "0").utf8)), "the signature covers the exact text")
        #expect(signed.nonce == "e5a1c8b2-3c4d-4e5f-8a9b-0c1d2e3f4a5b" && signed.issuedAt == 1_790_000_000_123)
    }
}
