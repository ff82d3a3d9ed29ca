import AppStoreNotifications
import AppStoreOffers
import ArgumentParser
import Foundation

/// `pipelinectl offers`: the signatures StoreKit takes for offers (docs/offers.md).
struct OffersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offers", abstract: "Sign promotional offers and introductory-offer eligibility, as Apple's library does.",
        subcommands: [Sign.self])

    struct Sign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sign",
            abstract: "Print a signature StoreKit takes: promotional (V2 JWS), intro-eligibility (JWS), or v1 (the original promotional offer signature).",
            discussion: """
                Signed with the In-App Purchase key of APPSTORE_KEY_ID, APPSTORE_ISSUER_ID and APPSTORE_PRIVATE_KEY_FILE
                (the App Store Server API key is one), for --bundle-id. Header and claims are exactly what Apple's App
                Store Server Library writes (audiences `promotional-offer`, `introductory-offer-eligibility`); each
                signature has a new nonce. The output is the signature, its nonce and its time (JSON with --json).
                """)

        enum Kind: String, ExpressibleByArgument, CaseIterable {
            case promotional, introEligibility = "intro-eligibility", v1
        }

        @Argument(help: "promotional | intro-eligibility | v1") var kind: Kind
        @OptionGroup var appStore: AppStoreOptions
        @Option(help: "The subscription's product id.") var productId: String
        @Option(help: "The promotional offer's identifier (promotional, v1).") var offerId: String?
        @Option(help: "Any transaction id of the customer, or their appTransactionId (promotional: optional; intro-eligibility: required).") var transactionId: String?
        @Flag(inversion: .prefixedNo, help: "intro-eligibility: whether the customer may have the introductory offer.") var allow: Bool?
        @Option(help: "v1: the applicationUsername the app passes to StoreKit (often the appAccountToken); may be empty.") var applicationUsername = ""
        @Option(help: "v1: the nonce (a UUID; a new one when absent).") var nonce: String?
        @Option(help: "v1: the timestamp in UNIX milliseconds (now when absent).") var timestamp: Int64?
        @Flag(help: "Print JSON.") var json = false

        func validate() throws {
            switch kind {
            case .promotional, .v1:
                guard offerId?.isEmpty == false else { throw ValidationError("\(kind.rawValue) needs --offer-id") }
            case .introEligibility:
                guard transactionId?.isEmpty == false else { throw ValidationError("intro-eligibility needs --transaction-id") }
                guard allow != nil else { throw ValidationError("intro-eligibility needs --allow or --no-allow") }
            }
            if let nonce, UUID(uuidString: nonce) == nil { throw ValidationError("--nonce must be a UUID, got \(UntrustedText.quoted(nonce))") }
        }

        func run() async throws {
            let configuration = try appStore.configuration()
            let creator = OfferSignatureCreator(
                keyId: configuration.keyId, issuerId: configuration.issuerId, bundleId: appStore.bundleId, signingKey: configuration.signingKey)
            let signed = switch kind {
            case .promotional: creator.promotionalOfferV2(productId: productId, offerIdentifier: offerId!, transactionId: transactionId)
            case .introEligibility: creator.introductoryOfferEligibility(productId: productId, allowIntroductoryOffer: allow!, transactionId: transactionId!)
            case .v1:
                creator.promotionalOfferV1(
                    productIdentifier: productId, subscriptionOfferId: offerId!, applicationUsername: applicationUsername,
                    nonce: nonce.flatMap(UUID.init(uuidString:)) ?? UUID(), timestamp: timestamp ?? Int64(Date().timeIntervalSince1970 * 1000))
            }
            if json {
                printJSON(.object(JSONObject([
                    "kind": .string(kind.rawValue), "signature": .string(signed.signature), "nonce": .string(signed.nonce),
                    "issuedAt": jsonValue(signed.issuedAt), "keyId": .string(configuration.keyId),
                ])))
            } else {
                print(signed.signature)
                FileHandle.standardError.write(Data("nonce \(signed.nonce), \(kind == .v1 ? "timestamp" : "iat") \(signed.issuedAt), key \(configuration.keyId)\n".utf8))
            }
        }
    }
}
