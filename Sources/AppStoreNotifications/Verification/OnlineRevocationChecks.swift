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

/// Chains that passed an online check, and when.
final class OnlineCheckCache: Sendable {
    private let entries = Mutex<[String: ContinuousClock.Instant]>([:])
    let lifetime: Duration

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
            if reasons.contains("revoked through OCSP") {
                throw .certificateRevoked("a certificate of the chain is revoked: \(reasons)")
            }
            throw .revocationCheckUnavailable("no verified OCSP answer: \(reasons); the record is retried")
        }
    }
}
