import AppStoreNotifications
import TestSupport
import Testing

/// Chains minted at test time that are valid except for exactly one property: each must be refused with the
/// error code naming that property, and the valid chain must pass (so the tests can fail).
@Suite("Certificate chain properties")
struct ChainPropertyTests {
    static let signedDate = TestDates.milliseconds("2026-06-01T12:00:00Z")

    func verifier(_ authority: TestCertificateAuthority) throws -> SignedPayloadVerifier {
        try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: "com.example.pipeline.app", appAppleId: 1_234_567_890)], trustedRoots: [authority.rootDER]))
    }

    func notification(_ chain: TestSigningChain, signedDate: Int64 = signedDate) -> String {
        NotificationMinter(chain: chain).signedNotification(.sample(seed: 1, signedDate: signedDate))
    }

    func code(_ verifier: SignedPayloadVerifier, _ jws: String) async -> String? {
        do {
            _ = try await verifier.verifyNotification(jws)
            return nil
        } catch {
            return error.code
        }
    }

    @Test("a valid minted chain verifies")
    func validChain() async throws {
        let authority = try TestCertificateAuthority()
        let verified = try await verifier(authority).verifyNotification(notification(try authority.issueChain()))
        #expect(verified.payload.notificationType == .didRenew)
        #expect(verified.transactionInfo?.model.originalTransactionId != nil)
        #expect(verified.renewalInfo?.model.autoRenewStatus == .on)
    }

    enum Defect: String, CaseIterable, Sendable {
        case leafWithoutAppleOID, intermediateWithoutAppleOID, leafExpired, leafNotYetValid, intermediateExpired
        case intermediateNotACertificateAuthority, leafKeyIsP384, otherRoot

        /// The error code the defect must be refused with.
        var expectedCode: String {
            switch self {
            case .leafWithoutAppleOID, .intermediateWithoutAppleOID: "missingAppleOID"
            case .leafExpired, .intermediateExpired: "certificateExpiredAtSignedDate"
            case .leafNotYetValid: "certificateNotYetValidAtSignedDate"
            case .intermediateNotACertificateAuthority, .otherRoot: "invalidChain"
            case .leafKeyIsP384: "signatureMismatch"
            }
        }

        /// The chain's options with this one defect (`otherRoot` is in the issuer, not the options).
        var options: TestCertificateAuthority.Options {
            var options = TestCertificateAuthority.Options()
            switch self {
            case .leafWithoutAppleOID: options.leafHasAppleOID = false
            case .intermediateWithoutAppleOID: options.intermediateHasAppleOID = false
            case .leafExpired: options.leafValidity = TestDates.date("2024-01-01T00:00:00Z")...TestDates.date("2025-01-01T00:00:00Z")
            case .leafNotYetValid: options.leafValidity = TestDates.date("2026-09-01T00:00:00Z")...TestDates.date("2027-09-01T00:00:00Z")
            case .intermediateExpired: options.intermediateValidity = TestDates.date("2021-01-01T00:00:00Z")...TestDates.date("2025-12-31T00:00:00Z")
            case .intermediateNotACertificateAuthority: options.intermediateIsCertificateAuthority = false
            case .leafKeyIsP384: options.leafUsesP384 = true
            case .otherRoot: break
            }
            return options
        }
    }

    @Test("one defect, its own error code", arguments: Defect.allCases)
    func defect(_ defect: Defect) async throws {
        let authority = try TestCertificateAuthority()
        // Another root of the same name, another key, for `otherRoot`.
        let issuer = defect == .otherRoot ? try TestCertificateAuthority() : authority
        let jws = notification(try issuer.issueChain(defect.options))
        #expect(await code(try verifier(authority), jws) == defect.expectedCode)
    }

    @Test("a cached chain still requires signedDate inside its validity window")
    func cacheRespectsValidity() async throws {
        let authority = try TestCertificateAuthority()
        let chain = try authority.issueChain()
        let verifier = try verifier(authority)
        _ = try await verifier.verifyNotification(notification(chain))
        #expect(verifier.cachedChainCount == 1)
        // Same x5c, so a cache hit, but signed after the leaf's notAfter (2027-10-13).
        let late = notification(chain, signedDate: TestDates.milliseconds("2030-01-01T00:00:00Z"))
        #expect(await code(verifier, late) == "certificateExpiredAtSignedDate")
        // Replaying an old notification later still verifies: validity is at signedDate, not now.
        _ = try await verifier.verifyNotification(notification(chain, signedDate: TestDates.milliseconds("2025-10-01T00:00:00Z")))
    }

    @Test("x5c[2] is never the trust anchor")
    func tokenRootIsNotTrusted() async throws {
        let trusted = try TestCertificateAuthority()
        let impostor = try TestCertificateAuthority()
        // A chain from the impostor PKI that carries the trusted root as x5c[2].
        let chain = try impostor.issueChain()
        var header = chain.header
        var x5c = chain.x5c
        x5c[2] = Base64.encode(trusted.rootDER, alphabet: .standard)
        header["x5c"] = .array(x5c.map(JSONValue.string))
        let jws = chain.sign(NotificationMinter(chain: chain).payload(.sample(seed: 3, signedDate: Self.signedDate)), header: header)
        #expect(await code(try verifier(trusted), jws) == "invalidChain")
    }
}
