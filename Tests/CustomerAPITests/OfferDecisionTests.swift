import AppStoreNotifications
import Crypto
import Foundation
import PipelineTestSupport
import TestGates
import TestSupport
import Testing

/// `POST /v1/apps/{bundleId}/customers/{customerId}/offers` through a real customer-api, worker, broker and
/// PostgreSQL (docs/offers.md): decisions from the history the pipeline holds, Apple-shaped signatures verifiable with
/// the key's public half, and the nonce ledger.
@Suite("Offers: decisions and signatures from the customer API", .serialized, .requiresKafkaAndPostgres)
struct OfferDecisionTests: ProcessSuite {
    static let product = "com.example.pipeline.pro.monthly"
    static let rules = """
        {"com.example.pipeline.app": [
            {"offer": "winback_50", "product": "\(product)", "kind": "winBack", "lapsedMoreThanDays": 30, "neverInBillingRetryOrGrace": true, "atMostOncePerDays": 180},
            {"offer": "loyal_3m", "product": "\(product)", "kind": "promotional", "requiresActive": true}
        ]}
        """

    /// The JWS's header and claims, after checking its signature with `key`.
    static func decode(_ jws: String, key: P256.Signing.PublicKey) throws -> (header: JSONObject, claims: JSONObject) {
        let parts = jws.split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64.decode(parts[2], alphabet: .url)))
        #expect(key.isValidSignature(signature, for: Array((parts[0] + "." + parts[1]).utf8)), "the JWS verifies with the In-App Purchase key's public half")
        return (
            try StrictJSONParser().parseObject(try #require(Base64.decode(parts[0], alphabet: .url))),
            try StrictJSONParser().parseObject(try #require(Base64.decode(parts[1], alphabet: .url))))
    }

    @Test("never subscribed, active and lapsed customers: intro eligibility, loyalty and win-back decided with their rules, signed as Apple's library, recorded with their nonces; scope offers only")
    func decisions() async throws {
        let keyFile = try mintedErasureKeyFile()
        defer { removeMintedFile(keyFile) }
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL, workerEnvironment: ["ERASURE_KEY_FILE": keyFile])
        let rulesFile = scene.fixture.directory + "/offer-rules.json"
        try Self.rules.write(toFile: rulesFile, atomically: true, encoding: .utf8)
        try await scene.startAPI(extra: ["OFFER_RULES_FILE": rulesFile, "ERASURE_KEY_FILE": keyFile])
        let writer = try await scene.key(scope: "write").secret
        let offers = try await scene.key(scope: "offers").secret
        let publicKey = scene.scene.apple.key.publicKey
        func decide(_ customer: String, _ body: [String: JSONValue] = [:], key: String? = nil) async throws -> (status: Int, json: JSONObject, headers: [String: String]) {
            var request = JSONObject(["productId": .string(Self.product)])
            for (name, value) in body { request[name] = value }
            return try await scene.request("POST", "/v1/apps/\(scene.bundleId)/customers/\(customer)/offers", key: key ?? offers, body: request)
        }

        // Scope: a write key may not sign offers; an offers key may not read customers.
        let newcomer = UUID().uuidString.lowercased()
        #expect(try await decide(newcomer, key: writer).status == 403)
        #expect(try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(newcomer)", key: offers).status == 403)
        // Never subscribed: the group is unknown until someone bought the product, or the caller names it.
        let unknown = try await decide(newcomer)
        #expect(unknown.status == 404 && unknown.json["error"]?.objectValue?["code"] == .string("unknown_subscription_group"), "\(unknown.json.serialized)")
        let fresh = try await decide(newcomer, ["subscriptionGroupIdentifier": .string("21000001")])
        #expect(fresh.status == 200, "\(fresh.json.serialized)")
        #expect(fresh.json["introductoryOffer"]?.objectValue?["eligible"] == .bool(true))
        #expect(fresh.json["introductoryOffer"]?.objectValue?["rule"] == .string("never-subscribed-in-group"))
        #expect(fresh.json["signed"] == nil && fresh.json["introductoryOfferSignature"] == nil, "nothing to sign without a transaction and an eligible offer")

        // Active: intro used up (signed as not allowed), the loyalty offer signed.
        let active = UUID().uuidString.lowercased()
        let current = currentPeriod(seed: 71, token: active)
        #expect(try await scene.purchase(current, customer: active, key: writer).status == 200)
        let loyal = try await decide(active)
        #expect(loyal.status == 200, "\(loyal.json.serialized)")
        #expect(loyal.json["introductoryOffer"]?.objectValue?["eligible"] == .bool(false))
        #expect(loyal.json["introductoryOffer"]?.objectValue?["rule"] == .string("subscribed-before-in-group"))
        let introJWS = try #require(loyal.json["introductoryOfferSignature"]?.objectValue?["jws"]?.stringValue)
        let intro = try Self.decode(introJWS, key: publicKey)
        #expect(intro.header.serialized == #"{"alg":"ES256","kid":"\#(FakeAppleFixture.keyId)","typ":"JWT"}"#)
        #expect(intro.claims["aud"] == .string("introductory-offer-eligibility") && intro.claims["allowIntroductoryOffer"] == .bool(false))
        #expect(intro.claims["transactionId"] == .string(current.transactionId) && intro.claims["bid"] == .string(scene.bundleId))
        let options = loyal.json["offers"]?.arrayValue?.compactMap(\.objectValue) ?? []
        #expect(options.map { $0["offerIdentifier"] } == [.string("winback_50"), .string("loyal_3m")])
        #expect(options.first?["decision"]?.objectValue?["rule"] == .string("win-back-needs-a-lapsed-subscription"))
        let signed = try #require(loyal.json["signed"]?.objectValue)
        #expect(signed["offerIdentifier"] == .string("loyal_3m") && signed["kind"] == .string("promotional-offer"))
        let promotional = try Self.decode(try #require(signed["jws"]?.stringValue), key: publicKey)
        #expect(promotional.claims.keys == ["productId", "offerIdentifier", "transactionId", "bid", "iss", "aud", "iat", "nonce"])
        #expect(promotional.claims["aud"] == .string("promotional-offer") && promotional.claims["offerIdentifier"] == .string("loyal_3m"))
        #expect(promotional.claims["nonce"] == signed["nonce"] && promotional.claims["iss"] == .string(FakeAppleFixture.issuerId))
        // The customer redeems it: the purchase StoreKit makes carries the offer, and the worker links it to the nonce.
        var redeeming = current
        redeeming.transactionId = String(Int64(current.transactionId)! + 1)
        redeeming.purchaseDate = current.purchaseDate + 1_000
        redeeming.signedDate = redeeming.purchaseDate
        redeeming.offerType = 2
        redeeming.offerIdentifier = "loyal_3m"
        redeeming.notificationUUID = UUID().uuidString.lowercased()
        #expect(try await scene.purchase(redeeming, customer: active, key: writer).status == 200)
        let link = try await scene.query(
            "SELECT nonce || ' ' || coalesce(redeemed_transaction_id, '-') FROM offer_signatures WHERE offer_identifier = 'loyal_3m'", as: String.self)
        #expect(link == ["\(signed["nonce"]?.stringValue ?? "?") \(redeeming.transactionId)"], "\(link)")
        // And the backend hears of it: offer.redeemed, naming the nonce.
        var redeemedEvent: ReadEvent?
        let deadline = ContinuousClock.now + .seconds(10)
        while redeemedEvent == nil, ContinuousClock.now < deadline {
            redeemedEvent = try await scene.events(subject: current.originalTransactionId).first { $0.type == "offer.redeemed" }
            if redeemedEvent == nil { try await Task.sleep(for: .milliseconds(200)) }
        }
        let offerData = try #require(redeemedEvent?.data["offer"]?.objectValue, "no offer.redeemed event")
        #expect(offerData["nonce"] == signed["nonce"] && offerData["customerId"] == .string(active) && offerData["transactionId"] == .string(redeeming.transactionId))
        // Asking for the win-back offer by name: refused, with its rule, nothing signed.
        let refused = try await decide(active, ["offerIdentifier": .string("winback_50")])
        #expect(refused.status == 200 && refused.json["signed"] == nil)
        #expect(try await decide(active, ["offerIdentifier": .string("no_such_offer")]).status == 400)

        // Lapsed 45 days: the win-back offer, once in 180 days.
        let lapsed = UUID().uuidString.lowercased()
        var old = currentPeriod(seed: 72, token: lapsed)
        let day: Int64 = 86_400_000
        old.purchaseDate -= 75 * day
        old.expiresDate = old.purchaseDate + 30 * day
        old.signedDate = old.purchaseDate
        #expect(try await scene.purchase(old, customer: lapsed, key: writer).status == 200)
        let winBack = try await decide(lapsed)
        #expect(winBack.json["signed"]?.objectValue?["offerIdentifier"] == .string("winback_50"), "\(winBack.json.serialized)")
        let again = try await decide(lapsed, ["offerIdentifier": .string("winback_50")])
        #expect(again.json["signed"] == nil)
        let rule = again.json["offers"]?.arrayValue?.first?.objectValue?["decision"]?.objectValue?["rule"]
        #expect(rule == .string("at-most-once-per-180-days"), "\(again.json.serialized)")

        // The ledger: every signature with its nonce, customer, product and offer.
        let ledger = try await scene.query(
            "SELECT customer_id || ' ' || kind || ' ' || coalesce(offer_identifier, '-') FROM offer_signatures ORDER BY issued_at, kind", as: String.self)
        #expect(Set(ledger) == [
            "\(active) introductory-offer-eligibility -", "\(active) promotional-offer loyal_3m", "\(lapsed) introductory-offer-eligibility -",
            "\(lapsed) promotional-offer winback_50",
        ], "\(ledger)")
        #expect(try await scene.query("SELECT count(DISTINCT nonce)::int FROM offer_signatures", as: Int.self).first == ledger.count)
        // Erased with the customer.
        let eraser = try await scene.key(scope: "erase").secret
        let erased = try await scene.request("DELETE", "/v1/apps/\(scene.bundleId)/customers/\(lapsed)?requestId=offers-1&reason=test", key: eraser)
        #expect(erased.status == 202, "\(erased.json.serialized)")
        #expect(try await scene.query("SELECT count(*)::int FROM offer_signatures WHERE customer_id = '\(lapsed)'", as: Int.self) == [0])
        #expect(try await scene.query("SELECT count(*)::int FROM offer_signatures WHERE customer_id = '\(active)'", as: Int.self).first ?? 0 >= 2)
        await scene.finish()
    }
}
