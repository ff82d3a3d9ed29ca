// A test file, never a product's or a release build's: swift-certificates' OCSP types are internal, reachable only
// through `@testable import`, which only a test build (-enable-testing) allows.
import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import SwiftASN1
import Synchronization
import TestSupport
// The OCSP model types of swift-certificates are internal: a test responder builds its answers with them (debug
// builds enable testing), so the answers are exactly what the library's own policy parses.
@testable import X509

/// An OCSP responder for a test PKI: answers each request about a certificate of the chain, signed by that
/// certificate's issuer (the intermediate for the leaf, the root for the intermediate), echoing the nonce. Its state
/// is switched by the test: revoked serial numbers, down (throws, as a transport failure), garbage.
public final class TestOCSPResponder: Sendable {
    struct State {
        var revoked: Set<Certificate.SerialNumber> = []
        var down = false
        var garbage = false
        var unknownStatus = false
        var unauthorized = false
        var stale = false
        var queries = 0
        var issuers: [(certificate: Certificate, key: P384.Signing.PrivateKey)] = []
        var server: LoopbackServer?
    }

    let state = Mutex(State())

    /// `issuers`: each issuing certificate with its key (root and intermediate).
    public init(issuers: [(Certificate, P384.Signing.PrivateKey)] = []) {
        state.withLock { $0.issuers = issuers.map { ($0.0, $0.1) } }
    }

    /// Who signs answers: each issuing certificate with its key (for a chain issued after `serve()` named the URI).
    public func setIssuers(_ issuers: [(Certificate, P384.Signing.PrivateKey)]) { state.withLock { $0.issuers = issuers.map { ($0.0, $0.1) } } }
    public func revoke(_ certificate: Certificate) { state.withLock { _ = $0.revoked.insert(certificate.serialNumber) } }
    /// Down: no answer (in process: a thrown transport error; over HTTP: 503).
    public func setDown(_ down: Bool) { state.withLock { $0.down = down } }
    /// An `internalError` answer.
    public func setGarbage(_ garbage: Bool) { state.withLock { $0.garbage = garbage } }
    /// A verified answer whose status is `unknown`.
    public func setUnknownStatus(_ unknown: Bool) { state.withLock { $0.unknownStatus = unknown } }
    /// An `unauthorized` answer (the responder will not answer for these certificates).
    public func setUnauthorized(_ unauthorized: Bool) { state.withLock { $0.unauthorized = unauthorized } }
    /// A signed answer whose `nextUpdate` has passed (stale).
    public func setStale(_ stale: Bool) { state.withLock { $0.stale = stale } }
    public var queries: Int { state.withLock { $0.queries } }

    struct Unreachable: Error, CustomStringConvertible { var description: String { "connection refused" } }

    /// Serves `POST /ocsp` on loopback (RFC 6960 appendix A.1); returns the responder's URI.
    public func serve() async throws -> String {
        let router = Router()
        router.post("/ocsp") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 64 * 1024)
            guard let answer = try? self.answer(Array(buffer: body)) else { return Response(status: .serviceUnavailable) }
            return Response(
                status: .ok, headers: [.contentType: "application/ocsp-response"], body: .init(byteBuffer: ByteBuffer(bytes: answer)))
        }
        let server = try await LoopbackServer.start(router, name: "ocsp-responder", logger: quietLogger("ocsp-responder"))
        state.withLock { $0.server = server }
        return "http://127.0.0.1:\(server.port)/ocsp"
    }

    public func stop() async {
        await state.withLock { $0.server }?.stop()
    }

    /// What `OnlineRevocationChecks.query` calls (in process), and the HTTP route answers.
    public func answer(_ requestBytes: [UInt8]) throws -> [UInt8] {
        let (down, garbage, revoked, issuers, unknownStatus, unauthorized, stale) = state.withLock { state in
            state.queries += 1
            return (state.down, state.garbage, state.revoked, state.issuers, state.unknownStatus, state.unauthorized, state.stale)
        }
        if down { throw Unreachable() }
        if garbage { return [0x30, 0x03, 0x0A, 0x01, 0x02] }  // OCSPResponse { responseStatus: internalError }
        if unauthorized { return [0x30, 0x03, 0x0A, 0x01, 0x06] }  // OCSPResponse { responseStatus: unauthorized }
        let request = try OCSPRequest(derEncoded: requestBytes[...])
        let single = try require_(request.tbsRequest.requestList.first)
        let now = Date()
        guard let issuer = issuers.first(where: { Self.issued(single.certID, by: $0.certificate) }) else {
            throw Unreachable()
        }
        let status: OCSPCertStatus = revoked.contains(single.certID.serialNumber)
            ? .revoked(OCSPRevokedInfo(revocationTime: GeneralizedTime(now.addingTimeInterval(-3600)), revocationReason: CRLReason(rawValue: 1)))
            : unknownStatus ? .unknown : .good
        let updated = stale ? now.addingTimeInterval(-7 * 86_400) : now.addingTimeInterval(-60)
        var extensions: Certificate.Extensions?
        if let nonce = request.tbsRequest.requestExtensions?.first(where: { $0.oid == .OCSPExtensionID.nonceIdentifier }) {
            extensions = try Certificate.Extensions([nonce])
        }
        let data = OCSPResponseData(
            responderID: .byName(issuer.certificate.subject), producedAt: GeneralizedTime(stale ? updated : now.addingTimeInterval(-5)),
            responses: [OCSPSingleResponse(
                certID: single.certID, certStatus: status, thisUpdate: GeneralizedTime(updated),
                nextUpdate: GeneralizedTime(updated.addingTimeInterval(3600)))],
            responseExtensions: extensions)
        var serializer = DER.Serializer()
        try serializer.serialize(data)
        let dataBytes = serializer.serializedBytes
        let signature = try issuer.key.signature(for: dataBytes)
        let basic = BasicOCSPResponse(
            responseData: data, responseDataBytes: dataBytes[...], signatureAlgorithm: .ecdsaWithSHA384,
            signature: ASN1BitString(bytes: ArraySlice(signature.derRepresentation)), certs: nil)
        var out = DER.Serializer()
        try out.serialize(OCSPResponse.successful(basic))
        return out.serializedBytes
    }

    /// Whether `certID` names a certificate `issuer` issued (its name and key hashes).
    static func issued(_ certID: OCSPCertID, by issuer: Certificate) -> Bool {
        var serializer = DER.Serializer()
        guard (try? serializer.serialize(issuer.subject)) != nil else { return false }
        let nameHash = Array(Insecure.SHA1.hash(data: serializer.serializedBytes))
        let keyHash = Array(Insecure.SHA1.hash(data: issuer.publicKey.subjectPublicKeyInfoBytes))
        return Array(certID.issuerNameHash.bytes) == nameHash && Array(certID.issuerKeyHash.bytes) == keyHash
    }
}

struct MissingRequest: Error {}

func require_<T>(_ value: T?) throws -> T {
    guard let value else { throw MissingRequest() }
    return value
}
