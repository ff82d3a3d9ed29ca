import AppStoreNotifications
import Foundation
import TestSigning
import OCSPTestResponder
import Testing
import X509

/// Online revocation checks (OCSP) against a responder built with swift-certificates: good, revoked, unreachable,
/// an error answer; the verified-answer cache; offline verification unchanged.
@Suite("Online revocation checks (OCSP)")
struct OnlineRevocationTests {
    let authority: TestCertificateAuthority
    let chain: TestSigningChain
    let minter: NotificationMinter
    let responder: TestOCSPResponder

    init() throws {
        authority = try TestCertificateAuthority()
        var options = TestCertificateAuthority.Options()
        options.ocspURI = "http://ocsp.test.invalid/ocsp"
        chain = try authority.issueChain(options)
        minter = NotificationMinter(chain: chain)
        responder = TestOCSPResponder(issuers: [(authority.rootCertificate, authority.rootKey), (chain.intermediate, chain.intermediateKey!)])
    }

    func verifier(online: Bool) throws -> SignedPayloadVerifier {
        var configuration = try SignedPayloadVerifier.Configuration(
            apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER])
        if online {
            let responder = responder
            configuration.onlineChecks = OnlineRevocationChecks(cacheLifetime: .seconds(3600)) { request, uri in
                #expect(uri == "http://ocsp.test.invalid/ocsp")
                return try responder.answer(request)
            }
        }
        return try SignedPayloadVerifier(configuration: configuration)
    }

    /// The outcome as a value (a typed `catch` in an async test body crashed the 6.3.1 compiler's SILGen).
    func outcome(_ verifier: SignedPayloadVerifier, _ signed: String) async -> Result<VerifiedNotification, VerificationError> {
        do {
            return .success(try await verifier.verifyNotification(signed))
        } catch {
            return .failure(error)
        }
    }

    func notification(_ seed: Int) -> String {
        minter.signedNotification(NotificationMinter.SubscriptionEvent.sample(seed: seed))
    }

    @Test("a good chain passes, asking the responder about the leaf and the intermediate once; the answer is cached")
    func good() async throws {
        let verifier = try verifier(online: true)
        _ = try await verifier.verifyNotification(notification(1))
        #expect(responder.queries == 2, "the leaf and the intermediate, each once")
        _ = try await verifier.verifyNotification(notification(2))
        #expect(responder.queries == 2, "a chain that passed is not asked again within the cache lifetime")
    }

    @Test("a revoked leaf is a permanent failure with its code; offline verification of the same payload is unchanged")
    func revoked() async throws {
        responder.revoke(chain.leaf)
        let signed = notification(3)
        guard case .failure(let error) = await outcome(try verifier(online: true), signed) else { Issue.record("a revoked leaf verified"); return }
        #expect(error.code == "certificateRevoked" && !error.isTransient, "\(error)")
        #expect(error.reason.contains("revoked"))
        _ = try await verifier(online: false).verifyNotification(signed)
    }

    @Test("an unreachable responder or an error answer is transient, never a silent pass; once it answers, the record verifies")
    func unavailable() async throws {
        let verifier = try verifier(online: true)
        responder.setDown(true)
        guard case .failure(let down) = await outcome(verifier, notification(4)) else { Issue.record("verified without an OCSP answer"); return }
        #expect(down.code == "revocationCheckUnavailable" && down.isTransient, "\(down)")
        #expect(down.reason.contains("could not be reached"))
        responder.setDown(false)
        responder.setGarbage(true)
        guard case .failure(let garbage) = await outcome(verifier, notification(4)) else { Issue.record("verified on an error answer"); return }
        #expect(garbage.code == "revocationCheckUnavailable" && garbage.isTransient, "\(garbage)")
        responder.setGarbage(false)
        _ = try await verifier.verifyNotification(notification(4))
    }

    @Test("a nested JWS signed by a revoked chain fails the notification as nested, permanently")
    func nested() async throws {
        let other = try authority.issueChain({ var options = TestCertificateAuthority.Options(); options.ocspURI = "http://ocsp.test.invalid/ocsp"; return options }())
        let revokedResponder = TestOCSPResponder(issuers: [(authority.rootCertificate, authority.rootKey), (other.intermediate, other.intermediateKey!), (chain.intermediate, chain.intermediateKey!)])
        revokedResponder.revoke(other.leaf)
        var configuration = try SignedPayloadVerifier.Configuration(
            apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER])
        configuration.onlineChecks = OnlineRevocationChecks { request, _ in try revokedResponder.answer(request) }
        let verifier = try SignedPayloadVerifier(configuration: configuration)
        let event = NotificationMinter.SubscriptionEvent.sample(seed: 5)
        var payload = minter.payload(event)
        var data = payload["data"]?.objectValue ?? JSONObject()
        data["signedTransactionInfo"] = .string(other.sign(minter.transaction(event)))
        payload["data"] = .object(data)
        guard case .failure(let error) = await outcome(verifier, minter.chain.sign(payload)) else {
            Issue.record("a nested JWS from a revoked chain verified")
            return
        }
        #expect(error.code == "nestedInvalid" && error.rootCause.code == "certificateRevoked" && !error.isTransient, "\(error)")
    }
}
