import Crypto
import Synchronization
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Verifies App Store signed payloads the way Apple's App Store Server Library does, and stricter where Apple's
/// is lenient.
///
/// For each JWS, in Apple's order:
/// 1. size limit, then exactly three base64url segments (canonical, unpadded);
/// 2. the header: strict JSON, `alg` exactly `ES256`, no `crit`/`b64`, `x5c` of exactly three entries;
/// 3. the payload: strict JSON object of the expected kind, with a `signedDate`;
/// 4. the chain: each `x5c` entry exactly one canonical base64 DER certificate; `x5c[0]` via `x5c[1]` to a
///    *configured* root (the token's own `x5c[2]` is never trusted), RFC 5280 at the payload's signedDate,
///    Apple's intermediate and leaf OIDs;
/// 5. the ES256 signature (raw R‖S) over `header.payload` with the leaf's P-256 key;
/// 6. identity: bundle id, App Apple ID (Production) and environment against the configured apps;
/// 7. for a notification, every nested JWS through steps 1–6, bound to the notification's bundle id and environment.
///
/// The verifier is pure apart from the chain cache, and safe to share between tasks on all cores.
public final class SignedPayloadVerifier: Sendable {
    /// What the verifier trusts and accepts.
    public struct Configuration: Sendable {
        /// DER of the trusted roots. Default: Apple Root CA - G3 only.
        public var trustedRoots: [[UInt8]]
        /// The apps (bundle id, App Apple ID, environments) payloads must belong to.
        public var apps: [AppIdentity]
        /// Longest signed payload accepted, in bytes. Apple's notifications are about 19 KB.
        public var maximumPayloadBytes: Int
        /// Accept Xcode and LocalTesting data *without* a signature check, as Apple's library does for those
        /// environments. For local StoreKit testing only; never enable in production.
        public var allowLocallySignedEnvironments: Bool
        /// How many distinct verified chains to remember.
        public var chainCacheCapacity: Int
        /// Online revocation checks (OCSP) after the offline chain check; nil (the default): offline only.
        public var onlineChecks: OnlineRevocationChecks?

        public init(
            apps: [AppIdentity],
            trustedRoots: [[UInt8]]? = nil,
            maximumPayloadBytes: Int = 256 * 1024,
            allowLocallySignedEnvironments: Bool = false,
            chainCacheCapacity: Int = 64
        ) throws(TrustAnchorError) {
            self.apps = apps
            if let trustedRoots {
                self.trustedRoots = trustedRoots
            } else {
                self.trustedRoots = [try AppleRootCertificate.derBytes]
            }
            self.maximumPayloadBytes = maximumPayloadBytes
            self.allowLocallySignedEnvironments = allowLocallySignedEnvironments
            self.chainCacheCapacity = chainCacheCapacity
        }
    }

    public let configuration: Configuration
    private let roots: CertificateStore
    private let cache: CertificateChainCache
    let onlineCache: OnlineCheckCache?
    /// The trusted roots, for the online check's own chain building.
    var trustRoots: CertificateStore { roots }
    private let headers: BoundedCache<String, [String]>
    /// The header segment validated last, as bytes: compared before the cache, whose key is a `String` of the
    /// ≈5 KB segment (making it costs a copy and UTF-8 validation per JWS, three per notification).
    private let recentHeader = Mutex<(segment: [UInt8], x5c: [String])?>(nil)
    private let parser = StrictJSONParser(maximumDepth: 16)

    public init(configuration: Configuration) throws(TrustAnchorError) {
        self.configuration = configuration
        var certificates: [Certificate] = []
        for der in configuration.trustedRoots {
            do {
                certificates.append(try Certificate(derEncoded: der))
            } catch {
                throw TrustAnchorError.invalidRootCertificate("\(error)")
            }
        }
        guard !certificates.isEmpty else { throw TrustAnchorError.invalidRootCertificate("no trusted root configured") }
        self.roots = CertificateStore(certificates)
        self.cache = CertificateChainCache(capacity: configuration.chainCacheCapacity)
        self.onlineCache = configuration.onlineChecks.map { OnlineCheckCache(lifetime: $0.cacheLifetime) }
        self.headers = BoundedCache(capacity: configuration.chainCacheCapacity)
    }

    /// Number of chains currently cached (for metrics and tests).
    public var cachedChainCount: Int { cache.count }

    // MARK: - Public entry points

    /// Verifies a notification (`signedPayload`) and every JWS nested in it.
    public func verifyNotification(_ signedPayload: String) async throws(VerificationError) -> VerifiedNotification {
        let outer = try await verifyJWS(signedPayload, expected: .notification)
        return try await finishNotification(outer)
    }

    /// Verifies a signed transaction on its own (bundle id and environment against the configured apps).
    public func verifyTransaction(_ signedTransaction: String) async throws(VerificationError) -> VerifiedPayload<JWSTransactionDecodedPayload> {
        let jws = try await verifyJWS(signedTransaction, expected: .transaction)
        return try finishTransaction(jws, boundTo: nil)
    }

    /// Verifies a signed renewal info on its own (environment against the configured apps).
    public func verifyRenewalInfo(_ signedRenewalInfo: String) async throws(VerificationError) -> VerifiedPayload<JWSRenewalInfoDecodedPayload> {
        let jws = try await verifyJWS(signedRenewalInfo, expected: .renewalInfo)
        return try finishRenewalInfo(jws, boundTo: nil)
    }

    /// Verifies a signed app transaction on its own.
    public func verifyAppTransaction(_ signedAppTransaction: String) async throws(VerificationError) -> VerifiedPayload<AppTransaction> {
        let jws = try await verifyJWS(signedAppTransaction, expected: .appTransaction)
        return try finishAppTransaction(jws, boundTo: nil)
    }

    /// Verifies any kind of App Store JWS; with `kind` nil the kind is told from the payload's fields.
    public func verify(_ jws: String, as kind: PayloadKind?) async throws(VerificationError) -> VerifiedSignedData {
        let verified = try await verifyJWS(jws, expected: kind)
        switch verified.kind {
        case .notification: return .notification(try await finishNotification(verified))
        case .transaction: return .transaction(try finishTransaction(verified, boundTo: nil))
        case .renewalInfo: return .renewalInfo(try finishRenewalInfo(verified, boundTo: nil))
        case .appTransaction: return .appTransaction(try finishAppTransaction(verified, boundTo: nil))
        }
    }

    // MARK: - One JWS

    /// A JWS whose structure, chain and signature verified; identity not checked yet.
    struct VerifiedJWS: Sendable {
        var kind: PayloadKind
        var payload: JSONObject
        var signedDate: Timestamp
    }

    /// The parsed parts of a JWS, before any cryptography.
    struct ParsedJWS: Sendable {
        var x5c: [String]
        var payload: JSONObject
        var signature: [UInt8]
        var digest: SHA256.Digest
    }

    func verifyJWS(_ jws: String, expected: PayloadKind?) async throws(VerificationError) -> VerifiedJWS {
        let parsed = try parse(jws)

        let detected = PayloadKind.detect(parsed.payload)
        guard let kind = expected ?? detected, detected == kind else {
            throw .wrongPayloadKind(expected: expected ?? .notification, found: detected)
        }
        let signedDate = try Self.signedDate(of: parsed.payload, kind: kind)

        if let claimed = Self.claimedEnvironment(of: parsed.payload, kind: kind),
            let environment = Environment(rawValue: claimed), !environment.isSignedByApple
        {
            guard configuration.allowLocallySignedEnvironments else {
                throw .environmentNotAllowed(
                    "\(claimed) data is signed locally, not by the App Store; it is refused unless local development is enabled")
            }
            // Apple's library decodes such data without a signature check; so do we, only when asked to.
            return VerifiedJWS(kind: kind, payload: parsed.payload, signedDate: signedDate)
        }

        let leafKey = try await verifiedLeafKey(x5c: parsed.x5c, signedDate: signedDate)
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try P256.Signing.ECDSASignature(rawRepresentation: parsed.signature)
        } catch {
            throw .signatureMismatch("signature is not a valid raw R‖S pair")
        }
        guard leafKey.isValidSignature(signature, for: parsed.digest) else {
            throw .signatureMismatch("the ES256 signature does not verify with the leaf certificate's key")
        }
        try await checkOnlineIfDue(x5c: parsed.x5c, signedDate: signedDate)
        return VerifiedJWS(kind: kind, payload: parsed.payload, signedDate: signedDate)
    }

    /// Steps 1–3 on a string's UTF-8 (contiguous for native strings, so no copy).
    func parse(_ jws: String) throws(VerificationError) -> ParsedJWS {
        var jws = jws
        return try jws.withUTF8 { buffer in
            Result { () throws(VerificationError) -> ParsedJWS in try parse(buffer) }
        }.get()
    }

    /// Steps 1–3: structure and JSON, no cryptography but the digest.
    func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(VerificationError) -> ParsedJWS {
        guard bytes.count <= configuration.maximumPayloadBytes else {
            throw .payloadTooLarge(size: bytes.count, limit: configuration.maximumPayloadBytes)
        }
        guard bytes.count > 0 else { throw .malformedJWS("the signed payload is empty") }
        var dots: [Int] = []
        for index in bytes.indices where bytes[index] == UInt8(ascii: ".") {
            dots.append(index)
            if dots.count > 2 { break }
        }
        guard dots.count == 2 else {
            throw .malformedJWS("a compact JWS has exactly 3 dot-separated segments, this has \(dots.count > 2 ? "more than 3" : "\(dots.count + 1)")")
        }
        let headerSegment = UnsafeBufferPointer(rebasing: bytes[..<dots[0]])
        let payloadSegment = UnsafeBufferPointer(rebasing: bytes[(dots[0] + 1)..<dots[1]])
        let signatureSegment = UnsafeBufferPointer(rebasing: bytes[(dots[1] + 1)...])
        for (name, segment) in [("header", headerSegment), ("payload", payloadSegment), ("signature", signatureSegment)] where segment.isEmpty {
            throw .malformedJWS("the \(name) segment is empty")
        }
        let x5c = try headerCertificates(headerSegment)
        guard let payloadBytes = Base64.decode(payloadSegment, alphabet: .url) else {
            throw .malformedJWS("the payload segment is not canonical unpadded base64url")
        }
        guard let signature = Base64.decode(signatureSegment, alphabet: .url) else {
            throw .malformedJWS("the signature segment is not canonical unpadded base64url")
        }
        guard signature.count == 64 else {
            throw .signatureMismatch("the signature is \(signature.count) bytes; ES256 signatures are 64 (raw R‖S)")
        }

        let payload = try strictObject(payloadBytes) { .malformedPayload("the payload is not a strict JSON object: \($0)") }
        var hasher = SHA256()
        hasher.update(bufferPointer: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[..<dots[1]])))
        return ParsedJWS(x5c: x5c, payload: payload, signature: signature, digest: hasher.finalize())
    }

    /// `bytes` as a strict JSON object read by `parser` (the verifier's own unless another is given), or `failure`
    /// with the parser's reason.
    func strictObject(_ bytes: [UInt8], parser: StrictJSONParser? = nil, or failure: (String) -> VerificationError) throws(VerificationError) -> JSONObject {
        do {
            return try (parser ?? self.parser).parseObject(bytes)
        } catch {
            throw failure("\(error)")
        }
    }

    /// One of our own records (a status snapshot, a purchase): a strict JSON object at most 8 levels deep, or
    /// `malformedPayload` naming `what` it should have been.
    func recordObject(_ value: [UInt8], _ what: String) throws(VerificationError) -> JSONObject {
        try strictObject(value, parser: StrictJSONParser(maximumDepth: 8)) { .malformedPayload("\(what) is not a JSON object: \($0)") }
    }

    /// Step 2: the protected header's `x5c`, after checking `alg`, `crit`, `b64` and the chain's shape.
    ///
    /// The result is a pure function of the header's exact bytes, and the three JWSs of a notification (and every
    /// notification signed by the same leaf) share one header, so valid headers are remembered by their segment.
    func headerCertificates(_ headerSegment: UnsafeBufferPointer<UInt8>) throws(VerificationError) -> [String] {
        if let recent = recentHeader.withLock({ $0 }), recent.segment.count == headerSegment.count,
            recent.segment.withUnsafeBufferPointer({ sameBytes($0, headerSegment) })
        {
            return recent.x5c
        }
        let key = String(decoding: headerSegment, as: UTF8.self)
        if let x5c = headers.lookup(key) {
            recentHeader.withLock { $0 = (Array(headerSegment), x5c) }
            return x5c
        }
        guard let headerBytes = Base64.decode(headerSegment, alphabet: .url) else {
            throw .malformedJWS("the header segment is not canonical unpadded base64url")
        }
        let header = try strictObject(headerBytes) { .malformedHeader("the protected header is not a strict JSON object: \($0)") }
        guard let algorithm = header["alg"] else { throw .unsupportedAlgorithm("the header has no alg; App Store JWSs use ES256") }
        guard algorithm == .string("ES256") else {
            throw .unsupportedAlgorithm("alg is \(UntrustedText.escaped(algorithm.serialized, limit: 40)); only ES256 is accepted")
        }
        if header["crit"] != nil {
            throw .unsupportedHeaderParameter("the header lists critical extensions (crit) this verifier does not implement")
        }
        if header["b64"] != nil {
            throw .unsupportedHeaderParameter("the b64 header parameter (RFC 7797 unencoded payload) is not used by the App Store")
        }
        guard let x5cValue = header["x5c"] else { throw .invalidChain("the header has no x5c certificate chain") }
        guard case .array(let x5cEntries) = x5cValue else { throw .invalidChain("x5c is a \(x5cValue.typeName), not an array") }
        guard x5cEntries.count == 3 else {
            throw .invalidChain("x5c has \(x5cEntries.count) certificates; App Store chains have exactly 3 (leaf, intermediate, root)")
        }
        var x5c: [String] = []
        x5c.reserveCapacity(3)
        for (position, entry) in x5cEntries.enumerated() {
            guard case .string(let string) = entry else { throw .invalidCertificate("x5c[\(position)] is a \(entry.typeName), not a string") }
            x5c.append(string)
        }
        headers.insert(x5c, for: key)
        recentHeader.withLock { $0 = (Array(headerSegment), x5c) }
        return x5c
    }

    static func signedDate(of payload: JSONObject, kind: PayloadKind) throws(VerificationError) -> Timestamp {
        // An app transaction's date is its receiptCreationDate, as in Apple's library.
        let field = kind == .appTransaction && payload["receiptCreationDate"] != nil ? "receiptCreationDate" : "signedDate"
        guard let value = payload[field] else {
            throw .malformedPayload("the payload has no \(field); certificate validity is evaluated at it")
        }
        guard let milliseconds = value.int64Value else {
            throw .malformedPayload("\(field) is \(UntrustedText.escaped(value.serialized, limit: 40)), not an integer of milliseconds since 1970")
        }
        return Timestamp(millisecondsSince1970: milliseconds)
    }

    /// The environment a payload claims, before verification (to refuse locally signed data early).
    static func claimedEnvironment(of payload: JSONObject, kind: PayloadKind) -> String? {
        switch kind {
        case .notification:
            for container in ["data", "summary", "appData"] {
                if let environment = payload[container]?.objectValue?["environment"]?.stringValue { return environment }
            }
            return nil
        case .transaction, .renewalInfo:
            return payload["environment"]?.stringValue
        case .appTransaction:
            return payload["receiptType"]?.stringValue
        }
    }

    // MARK: - Chain

    func verifiedLeafKey(x5c: [String], signedDate: Timestamp) async throws(VerificationError) -> P256.Signing.PublicKey {
        let milliseconds = signedDate.millisecondsSince1970
        if let entry = cache.lookup(x5c), entry.covers(milliseconds) {
            return entry.leafKey
        }
        var certificates: [Certificate] = []
        for (position, entry) in x5c.enumerated() {
            certificates.append(try Self.certificate(entry, position: position))
        }
        let leaf = certificates[0]
        let intermediate = certificates[1]

        guard intermediate.extensions.contains(where: { $0.oid == AppleCertificateOID.wwdrIntermediate }) else {
            throw .missingAppleOID("the intermediate certificate lacks the Apple WWDR OID 1.2.840.113635.100.6.2.1")
        }
        guard leaf.extensions.contains(where: { $0.oid == AppleCertificateOID.receiptSigningLeaf }) else {
            throw .missingAppleOID("the leaf certificate lacks the App Store receipt-signing OID 1.2.840.113635.100.6.11.1")
        }
        let date = signedDate.date
        for (name, certificate) in [("leaf", leaf), ("intermediate", intermediate)] {
            if date > certificate.notValidAfter {
                throw .certificateExpiredAtSignedDate(
                    "the \(name) certificate expired \(Timestamp(certificate.notValidAfter)), before signedDate \(signedDate)")
            }
            if date < certificate.notValidBefore {
                throw .certificateNotYetValidAtSignedDate(
                    "the \(name) certificate is valid from \(Timestamp(certificate.notValidBefore)), after signedDate \(signedDate)")
            }
        }
        guard let leafKey = P256.Signing.PublicKey(leaf.publicKey) else {
            throw .unsupportedAlgorithm("the leaf certificate's key is not a P-256 key, so it cannot verify ES256")
        }

        var verifier = Verifier(rootCertificates: roots) {
            RFC5280Policy(fixedExpiryValidationTime: date)
            AppleChainPolicy()
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        switch result {
        case .validCertificate(let chain):
            let validFrom = chain.map { Timestamp($0.notValidBefore).millisecondsSince1970 }.max() ?? milliseconds
            let validUntil = chain.map { Timestamp($0.notValidAfter).millisecondsSince1970 }.min() ?? milliseconds
            cache.insert(.init(leafKey: leafKey, validFrom: validFrom, validUntil: validUntil), for: x5c)
            return leafKey
        case .couldNotValidate(let failures):
            let reasons = Set(failures.map { String(describing: $0.policyFailureReason) }).sorted()
            throw .invalidChain(
                "no valid path from x5c[0] through x5c[1] to a configured root"
                    + (reasons.isEmpty ? "" : ": " + reasons.joined(separator: "; ")))
        }
    }

    /// A chain's key in the online check's cache: its leaf and intermediate as sent.
    static func chainKey(_ x5c: [String]) -> String { x5c.prefix(2).joined(separator: ".") }

    /// One `x5c` entry: canonical standard base64 of exactly one DER certificate, nothing before or after.
    static func certificate(_ entry: String, position: Int) throws(VerificationError) -> Certificate {
        guard let der = Base64.decode(entry, alphabet: .standard) else {
            throw .invalidCertificate("x5c[\(position)] is not canonical standard base64 (RFC 7515 §4.1.6)")
        }
        do {
            let node = try DER.parse(der)
            guard node.encodedBytes.count == der.count else {
                throw VerificationError.invalidCertificate(
                    "x5c[\(position)] has \(der.count - node.encodedBytes.count) bytes after the certificate's DER")
            }
            return try Certificate(derEncoded: node)
        } catch let error as VerificationError {
            throw error
        } catch {
            throw .invalidCertificate("x5c[\(position)] is not a DER X.509 certificate: \(error)")
        }
    }
}

// MARK: - Results

/// A verified payload of one kind: the typed model, and the JSON exactly as signed (unknown fields included).
public struct VerifiedPayload<Model: Sendable>: Sendable {
    public let model: Model
    /// The payload as signed, for archiving as jsonb so fields Apple adds later are not lost.
    public let json: JSONObject
    /// The date certificate validity was evaluated at.
    public let signedDate: Timestamp
}

/// A verified notification with its verified nested payloads.
public struct VerifiedNotification: Sendable {
    public let payload: ResponseBodyV2DecodedPayload
    public let json: JSONObject
    public let signedDate: Timestamp
    /// The verified identity the notification belongs to.
    public let bundleId: String
    public let environment: Environment
    public let transactionInfo: VerifiedPayload<JWSTransactionDecodedPayload>?
    public let renewalInfo: VerifiedPayload<JWSRenewalInfoDecodedPayload>?
    public let appTransactionInfo: VerifiedPayload<AppTransaction>?
    /// Set on a purchase posted through the customer API (record kind `purchase`): who claims it, under which policy.
    public var purchase: PurchaseClaim? = nil
}

/// Any verified App Store JWS, for tools that take whatever they are given.
public enum VerifiedSignedData: Sendable {
    case notification(VerifiedNotification)
    case transaction(VerifiedPayload<JWSTransactionDecodedPayload>)
    case renewalInfo(VerifiedPayload<JWSRenewalInfoDecodedPayload>)
    case appTransaction(VerifiedPayload<AppTransaction>)

    public var kind: PayloadKind {
        switch self {
        case .notification: .notification
        case .transaction: .transaction
        case .renewalInfo: .renewalInfo
        case .appTransaction: .appTransaction
        }
    }
}

// MARK: - Benchmark hooks

extension SignedPayloadVerifier {
    /// Steps 1–3 alone (segments, base64, strict JSON, digest) for the benchmark's cost breakdown.
    @_spi(Benchmarks)
    public func parseWithoutCryptography(_ jws: String) throws(VerificationError) -> Int {
        try parse(jws).payload.count
    }
}

// MARK: - Book seeding (dev tool, never the pipeline's path)

extension VerifiedPayload {
    /// A payload taken as verified without a signature check: only for writing a synthetic book of our own
    /// making straight into a database (the seed tool), where every row must be what the worker would write.
    @_spi(BookSeeding)
    public init(unverifiedModel model: Model, json: JSONObject, signedDate: Timestamp) {
        self.init(model: model, json: json, signedDate: signedDate)
    }
}

extension VerifiedNotification {
    /// A notification taken as verified without a signature check (see `VerifiedPayload.init(unverifiedModel:)`).
    @_spi(BookSeeding)
    public init(
        unverified payload: ResponseBodyV2DecodedPayload, json: JSONObject, bundleId: String, environment: Environment,
        transactionInfo: VerifiedPayload<JWSTransactionDecodedPayload>?, renewalInfo: VerifiedPayload<JWSRenewalInfoDecodedPayload>?
    ) {
        self.init(
            payload: payload, json: json, signedDate: payload.signedDate ?? Timestamp(millisecondsSince1970: 0), bundleId: bundleId,
            environment: environment, transactionInfo: transactionInfo, renewalInfo: renewalInfo, appTransactionInfo: nil)
    }
}
