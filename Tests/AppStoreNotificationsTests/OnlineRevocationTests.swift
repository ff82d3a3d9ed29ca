import AppStoreNotifications
import Foundation
import TestSigning
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

    @Test("definitive answers that are not good are permanent, each with its code: unknown, unauthorized, stale; only no answer waits")
    func definitiveAnswers() async throws {
        for (mode, code) in [("unknown", "revocationStatusUnknown"), ("unauthorized", "revocationCheckRefused"), ("stale", "revocationAnswerInvalid")] {
            let verifier = try verifier(online: true)
            responder.setUnknownStatus(mode == "unknown")
            responder.setUnauthorized(mode == "unauthorized")
            responder.setStale(mode == "stale")
            guard case .failure(let error) = await outcome(verifier, notification(6)) else {
                Issue.record("\(mode): verified without a good answer")
                continue
            }
            #expect(error.code == code && !error.isTransient, "\(mode): \(error)")
        }
        responder.setUnknownStatus(false)
        responder.setUnauthorized(false)
        responder.setStale(false)
        _ = try await verifier(online: true).verifyNotification(notification(6))
    }

    @Test("the online check runs after the signature check, and once per chain at a time: a forged signature asks nothing; 30 concurrent records ask once")
    func afterSignatureAndSingleFlight() async throws {
        let responder = responder
        var configuration = try SignedPayloadVerifier.Configuration(
            apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER])
        configuration.onlineChecks = OnlineRevocationChecks(cacheLifetime: .seconds(3600)) { request, _ in
            try await Task.sleep(for: .milliseconds(100))  // a responder that takes its time: the records meet in flight
            return try responder.answer(request)
        }
        let verifier = try SignedPayloadVerifier(configuration: configuration)
        // A valid chain with a signature that does not verify: refused as such, without an OCSP query.
        let genuine = notification(7)
        let parts = genuine.split(separator: ".")
        var signature = Array(Base64.decode(parts[2], alphabet: .url)!)
        signature[10] ^= 0xFF
        let forged = parts[0] + "." + parts[1] + "." + Base64.encode(signature, alphabet: .url)
        guard case .failure(let error) = await outcome(verifier, String(forged)) else { Issue.record("a forged signature verified"); return }
        #expect(error.code == "signatureMismatch")
        #expect(responder.queries == 0, "no query for a payload whose signature fails")
        let results = await withTaskGroup(of: Bool.self) { group in
            for seed in 0..<30 { group.addTask { (try? await verifier.verifyNotification(self.notification(100 + seed))) != nil } }
            var all: [Bool] = []
            for await result in group { all.append(result) }
            return all
        }
        #expect(results.allSatisfy { $0 }, "every record verified")
        #expect(responder.queries == 2, "one check of the chain (the leaf and the intermediate), not one per record: \(responder.queries)")
    }
}
