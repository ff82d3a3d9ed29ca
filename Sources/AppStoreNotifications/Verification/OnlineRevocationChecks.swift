import Foundation
import Synchronization
@_spi(FixedExpiryValidationTime) import X509

/// Online revocation checks (OCSP), as Apple's library offers beside the offline check: each certificate of the chain
/// that names an OCSP responder (Apple's leaf and intermediate do) is checked with it, through swift-certificates'
/// `OCSPVerifierPolicy` in its hard mode (the response must verify: signature, responder, nonce, freshness).
///
/// - A revoked certificate is a permanent failure: `VerificationError.certificateRevoked`.
/// - No verified answer (the responder unreachable, an error status, an answer that does not verify) is
///   `VerificationError.revocationCheckUnavailable`, transient: the worker retries the record, never accepts it
///   unchecked.
/// - A chain that passed is not asked again for `cacheLifetime` (a verified-response cache per chain).
///
/// The transport is the caller's (`query`): this library does no I/O; the services pass an HTTP client.
/// Off by default; archived payloads are always verified offline (`pipelinectl verify`, the archive).
public struct OnlineRevocationChecks: Sendable {
    /// POSTs a DER OCSP request to `uri` and returns the DER response; throws when no answer came.
    public var query: @Sendable (_ request: [UInt8], _ uri: String) async throws -> [UInt8]
    /// How long a chain that passed stays checked.
    public var cacheLifetime: Duration

    public init(cacheLifetime: Duration = .seconds(3600), query: @escaping @Sendable (_ request: [UInt8], _ uri: String) async throws -> [UInt8]) {
        self.query = query
        self.cacheLifetime = cacheLifetime
    }
}

/// Chains that passed an online check, and when; and the checks under way.
final class OnlineCheckCache: Sendable {
    private let entries = Mutex<[String: ContinuousClock.Instant]>([:])
    let lifetime: Duration
    /// The checks under way: one per chain at a time.
    let flights = SingleFlight<String, VerificationError?>()

    init(lifetime: Duration) { self.lifetime = lifetime }

    func isFresh(_ key: String) -> Bool {
        entries.withLock { entries in entries[key].map { ContinuousClock.now - $0 < lifetime } ?? false }
    }

    func record(_ key: String) {
        entries.withLock { entries in
            if entries.count > 4_096 { entries.removeAll() }
            entries[key] = .now
        }
    }
}

/// The requester handed to `OCSPVerifierPolicy`: the caller's transport; a transport failure is terminal for the
/// policy (its non-terminal errors count as a pass) and noted, so the failure is reported as unavailable.
struct ProbingOCSPRequester: OCSPRequester {
    let query: @Sendable ([UInt8], String) async throws -> [UInt8]
    let probe: OCSPProbe

    func query(request: [UInt8], uri: String) async -> OCSPRequesterQueryResult {
        do {
            return .response(try await query(request, uri))
        } catch {
            probe.unreachable.withLock { $0 = "\(uri): \(error)" }
            return .terminalError(error)
        }
    }
}

final class OCSPProbe: Sendable {
    let unreachable = Mutex<String?>(nil)
}

extension SignedPayloadVerifier {
    /// The online check of a chain already verified offline (`leaf` issued by `intermediate`).
    func checkOnline(
        leaf: Certificate, intermediate: Certificate, at date: Date, key: String, checks: OnlineRevocationChecks, cache: OnlineCheckCache
    ) async throws(VerificationError) {
        if cache.isFresh(key) { return }
        let probe = OCSPProbe()
        var verifier = Verifier(rootCertificates: trustRoots) {
            RFC5280Policy(fixedExpiryValidationTime: date)
            AppleChainPolicy()
            OCSPVerifierPolicy(failureMode: .hard, requester: ProbingOCSPRequester(query: checks.query, probe: probe))
        }
        switch await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate])) {
        case .validCertificate:
            cache.record(key)
        case .couldNotValidate(let failures):
            let reasons = Set(failures.map { String(describing: $0.policyFailureReason) }).sorted().joined(separator: "; ")
            if let unreachable = probe.unreachable.withLock({ $0 }) {
                throw .revocationCheckUnavailable("the OCSP responder could not be reached (\(unreachable)); the record is retried")
            }
            throw Self.classify(reasons)
        }
    }

    /// What a definitive answer that is not `good` means (the policy's failure reasons, swift-certificates' words):
    /// revoked, unknown and refused are the responder's verified word; an answer that does not verify is invalid;
    /// only the responder's own "ask later" (`tryLater`, `internalError`) waits, as no answer does.
    static func classify(_ reasons: String) -> VerificationError {
        if reasons.contains("revoked through OCSP") { return .certificateRevoked("a certificate of the chain is revoked: \(reasons)") }
        if reasons.contains("status unknown") { return .revocationStatusUnknown("the OCSP responder does not know a certificate of the chain: \(reasons)") }
        if reasons.contains("OCSP request failed") {
            if reasons.contains("tryLater") || reasons.contains("internalError") {
                return .revocationCheckUnavailable("the OCSP responder asked to be asked later: \(reasons); the record is retried")
            }
            return .revocationCheckRefused("the OCSP responder refused to answer: \(reasons)")
        }
        return .revocationAnswerInvalid("the OCSP answer does not verify: \(reasons)")
    }

    /// The online check, once the signature verified: only a JWS whose signature holds costs a responder query (a
    /// forged one never makes us ask), and one query per chain at a time (`SingleFlight`): the records of a batch
    /// signed by one chain wait for the same answer when the cache expired.
    func checkOnlineIfDue(x5c: [String], signedDate: Timestamp) async throws(VerificationError) {
        guard let checks = configuration.onlineChecks, let onlineCache else { return }
        let key = Self.chainKey(x5c)
        if onlineCache.isFresh(key) { return }
        let leaf = try Self.certificate(x5c[0], position: 0)
        let intermediate = try Self.certificate(x5c[1], position: 1)
        let outcome = await onlineCache.flights.run(key) { () async -> VerificationError? in
            do throws(VerificationError) {
                try await self.checkOnline(leaf: leaf, intermediate: intermediate, at: signedDate.date, key: key, checks: checks, cache: onlineCache)
                return nil
            } catch {
                return error
            }
        }
        if let outcome { throw outcome }
    }
}
