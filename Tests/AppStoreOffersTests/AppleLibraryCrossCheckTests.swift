import AppStoreNotifications
import AppStoreOffers
import Crypto
import Foundation
import PipelineTestSupport
import TestSupport
import Testing

/// Our offer signatures beside the ones Apple's own App Store Server Library (Python, `app-store-server-library`
/// 3.1.2 in the venv) makes from the same key and inputs (scripts/apple-offer-signatures.py): the decoded headers
/// equal byte for byte, the claims in the same order with the same values (the time and the random nonce aside,
/// which each side draws), each side's signatures verify on the other side, and the V1 signature of ours verifies
/// over the payload Apple's library builds.
@Suite("Offer signatures against Apple's App Store Server Library (Python)")
struct AppleLibraryCrossCheckTests {
    @Test("promotional V2, intro eligibility and V1: Apple's library and ours agree field by field, and each verifies the other")
    func sameAsApplesLibrary() async throws {
        let key = P256.Signing.PrivateKey()  // minted here, written for the run only
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("offer-key-\(UUID().uuidString).p8")
        try key.pemRepresentation.write(to: keyFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: keyFile) }

        let keyId = "2X9R4HXF34", issuerId = "57246542-96fe-1a63-e053-0824d011072a", bundleId = "com.example.pipeline.app"
        let productId = "com.example.monthly", offerIdentifier = "winback_50", transactionId = "2000000123456789"
        let v1Nonce = UUID(), v1Timestamp: Int64 = 1_790_000_000_123, username = "A2F3C5D8-0000-4000-8000-0123456789AB"
        let creator = OfferSignatureCreator(keyId: keyId, issuerId: issuerId, bundleId: bundleId, signingKey: key)
        let ourV2 = creator.promotionalOfferV2(productId: productId, offerIdentifier: offerIdentifier, transactionId: transactionId).signature
        let ourIntro = creator.introductoryOfferEligibility(productId: productId, allowIntroductoryOffer: true, transactionId: transactionId).signature
        let ourV1 = creator.promotionalOfferV1(productIdentifier: productId, subscriptionOfferId: offerIdentifier, applicationUsername: username, nonce: v1Nonce, timestamp: v1Timestamp).signature

        let request = JSONObject([
            "keyPath": .string(keyFile.path), "keyId": .string(keyId), "issuerId": .string(issuerId), "bundleId": .string(bundleId),
            "productId": .string(productId), "offerIdentifier": .string(offerIdentifier), "transactionId": .string(transactionId),
            "v1": .object(JSONObject(["applicationUsername": .string(username), "nonce": .string(v1Nonce.uuidString), "timestamp": .number(JSONNumber(v1Timestamp))])),
            "ourV1": .string(ourV1), "ourPromotionalV2": .string(ourV2), "ourIntroEligibility": .string(ourIntro),
        ])
        let script = repositoryRoot.appendingPathComponent("scripts/apple-offer-signatures.py").path
        let input = JSONValue.object(request).serialized
        let (status, output, errors) = try await DedicatedThread.run { try VenvPython.run([script], input: input, purpose: "the venv holds Apple's library") }
        try #require(status == 0, "Apple's library failed: \(errors)")
        let apple = try StrictJSONParser().parseObject(Array(output.utf8))

        // Each side verifies the other's signatures with the key's public half.
        for (name, audience) in [("ourPromotionalV2", "promotional-offer"), ("ourIntroEligibility", "introductory-offer-eligibility")] {
            guard case .object(let checked)? = apple[name] else { Issue.record("no answer for \(name)"); continue }
            #expect(checked["verifies"] == .bool(true), "PyJWT verifies our \(name) with audience \(audience): \(checked)")
        }
        #expect(apple["ourV1Verifies"] == .bool(true), "our V1 signature verifies over the payload Apple's library builds")
        guard case .string(let appleV1)? = apple["v1"], let appleV1Signature = Data(base64Encoded: appleV1) else { Issue.record("no V1 from Apple's library"); return }
        let payload = OfferSignatureCreator.v1Payload(bundleId: bundleId, keyId: keyId, productIdentifier: productId, subscriptionOfferId: offerIdentifier, applicationUsername: username, nonce: v1Nonce.uuidString, timestamp: v1Timestamp)
        #expect(key.publicKey.isValidSignature(try P256.Signing.ECDSASignature(derRepresentation: appleV1Signature), for: Array(payload.utf8)), "Apple's V1 signature verifies over our payload")

        // Field by field: Apple's JWS against ours for the same inputs.
        let cases: [(apple: String, ours: String, audience: String)] = [
            ("promotionalV2", ourV2, "promotional-offer"),
            ("promotionalV2WithoutTransaction", creator.promotionalOfferV2(productId: productId, offerIdentifier: offerIdentifier, transactionId: nil).signature, "promotional-offer"),
            ("introEligibilityTrue", ourIntro, "introductory-offer-eligibility"),
            ("introEligibilityFalse", creator.introductoryOfferEligibility(productId: productId, allowIntroductoryOffer: false, transactionId: transactionId).signature, "introductory-offer-eligibility"),
        ]
        for item in cases {
            guard case .string(let appleJWS)? = apple[item.apple] else { Issue.record("no \(item.apple) from Apple's library"); continue }
            // Each verified with the public key as it is decoded.
            let theirs = try OfferSignatureTests.parts(appleJWS, key: key)
            let ours = try OfferSignatureTests.parts(item.ours, key: key)
            #expect(ours.headerText == theirs.headerText, "\(item.apple): header \(ours.headerText) vs Apple's \(theirs.headerText)")
            #expect(ours.claims.keys == theirs.claims.keys, "\(item.apple): claims \(ours.claims.keys) vs Apple's \(theirs.claims.keys)")
            #expect(theirs.claims["aud"] == .string(item.audience) && ours.claims["aud"] == .string(item.audience))
            for name in theirs.claims.keys where name != "iat" && name != "nonce" {
                #expect(ours.claims[name] == theirs.claims[name], "\(item.apple): \(name) is \(String(describing: ours.claims[name])), Apple's library writes \(String(describing: theirs.claims[name]))")
            }
            if case .number(let ourTime)? = ours.claims["iat"], case .number(let theirTime)? = theirs.claims["iat"], let a = Int64(ourTime.literal), let b = Int64(theirTime.literal) {
                #expect(abs(a - b) < 300, "\(item.apple): iat in whole seconds on both sides (\(a), \(b))")
            } else {
                Issue.record("\(item.apple): iat is not an integer on both sides: \(String(describing: ours.claims["iat"])) / \(String(describing: theirs.claims["iat"]))")
            }
            for claims in [ours.claims, theirs.claims] {
                guard case .string(let nonce)? = claims["nonce"] else { Issue.record("\(item.apple): no nonce"); continue }
                #expect(nonce == nonce.lowercased() && UUID(uuidString: nonce) != nil, "\(item.apple): the nonce is a lowercase UUID (\(nonce))")
            }
        }
    }
}
