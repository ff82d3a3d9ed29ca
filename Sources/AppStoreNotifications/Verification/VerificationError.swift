/// Why a signed App Store payload was refused: a closed set of reasons, each with a stable ``code``.
///
/// Every case is *permanent*: the same bytes will fail the same way tomorrow, so the pipeline dead-letters them
/// with ``code`` and ``reason`` in the record headers. Re-driving helps only after the configuration changed
/// (a new app registered, another trusted root), which is what ``bundleIdMismatch`` and ``invalidChain`` tell
/// an operator to look at.
public indirect enum VerificationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The JWS is longer than the configured limit. Real notifications are about 19 KB.
    case payloadTooLarge(size: Int, limit: Int)
    /// Not a JWS in compact serialization: segment count, base64url spelling.
    case malformedJWS(String)
    /// The protected header is not a strict JSON object.
    case malformedHeader(String)
    /// The payload is not a strict JSON object, or a field has the wrong JSON type.
    case malformedPayload(String)
    /// `alg` is anything but `ES256`, or the leaf key cannot do ES256.
    case unsupportedAlgorithm(String)
    /// A header parameter changes how the JWS must be processed (`crit`, `b64`) and we do not implement it.
    case unsupportedHeaderParameter(String)
    /// An `x5c` entry is not exactly one canonical base64 DER certificate.
    case invalidCertificate(String)
    /// `x5c` is not a chain of 3, or the chain does not lead to a configured root.
    case invalidChain(String)
    /// The intermediate lacks 1.2.840.113635.100.6.2.1 or the leaf lacks 1.2.840.113635.100.6.11.1.
    case missingAppleOID(String)
    /// A certificate of the chain had expired at the payload's signedDate.
    case certificateExpiredAtSignedDate(String)
    /// A certificate of the chain was not yet valid at the payload's signedDate.
    case certificateNotYetValidAtSignedDate(String)
    /// The ES256 signature does not verify with the leaf's key over `header.payload`.
    case signatureMismatch(String)
    /// The payload is another kind than the one expected here (a transaction where a notification belongs).
    case wrongPayloadKind(expected: PayloadKind, found: PayloadKind?)
    /// The bundle id is not one this verifier is configured for (or does not match its notification).
    case bundleIdMismatch(String)
    /// The App Apple ID is missing (Production) or not the configured one.
    case appAppleIdMismatch(String)
    /// The environment is missing, unknown or not allowed for the app (or differs from its notification's).
    case environmentMismatch(String)
    /// Xcode or LocalTesting data: not signed by Apple, refused unless local development is enabled.
    case environmentNotAllowed(String)
    /// A nested JWS (signedTransactionInfo, signedRenewalInfo, signedAppTransactionInfo) is invalid.
    case nestedInvalid(NestedField, VerificationError)
    /// Online checks (`OnlineRevocationChecks`): the chain's responder says a certificate is revoked. Permanent.
    case certificateRevoked(String)
    /// Online checks: no answer at all from the responder (unreachable, timed out, or its own `tryLater` and
    /// `internalError`). The one *transient* case: the record waits and is verified again (`isTransient`), never accepted
    /// unchecked and never dead-lettered for it.
    case revocationCheckUnavailable(String)
    /// Online checks: the responder answered, verified, that it does not know the certificate's status (`unknown`).
    /// Permanent: asking again gets the same answer (re-drive once the responder knows it).
    case revocationStatusUnknown(String)
    /// Online checks: the responder refused to answer for this certificate (`unauthorized`, `sigRequired`,
    /// `malformedRequest`). Permanent.
    case revocationCheckRefused(String)
    /// Online checks: an answer came but does not verify (it does not parse, its signature or responder is wrong,
    /// its nonce differs, it is stale). Permanent: no answer is trusted unverified and none is waited for forever.
    case revocationAnswerInvalid(String)

    /// A stable identifier for dashboards, dead-letter headers and scripts. Never changes once released.
    public var code: String {
        switch self {
        case .payloadTooLarge: "payloadTooLarge"
        case .malformedJWS: "malformedJWS"
        case .malformedHeader: "malformedHeader"
        case .malformedPayload: "malformedPayload"
        case .unsupportedAlgorithm: "unsupportedAlgorithm"
        case .unsupportedHeaderParameter: "unsupportedHeaderParameter"
        case .invalidCertificate: "invalidCertificate"
        case .invalidChain: "invalidChain"
        case .missingAppleOID: "missingAppleOID"
        case .certificateExpiredAtSignedDate: "certificateExpiredAtSignedDate"
        case .certificateNotYetValidAtSignedDate: "certificateNotYetValidAtSignedDate"
        case .signatureMismatch: "signatureMismatch"
        case .wrongPayloadKind: "wrongPayloadKind"
        case .bundleIdMismatch: "bundleIdMismatch"
        case .appAppleIdMismatch: "appAppleIdMismatch"
        case .environmentMismatch: "environmentMismatch"
        case .environmentNotAllowed: "environmentNotAllowed"
        case .nestedInvalid: "nestedInvalid"
        case .certificateRevoked: "certificateRevoked"
        case .revocationCheckUnavailable: "revocationCheckUnavailable"
        case .revocationStatusUnknown: "revocationStatusUnknown"
        case .revocationCheckRefused: "revocationCheckRefused"
        case .revocationAnswerInvalid: "revocationAnswerInvalid"
        }
    }

    /// The innermost error: for ``nestedInvalid`` the error of the nested JWS, otherwise `self`.
    public var rootCause: VerificationError {
        if case .nestedInvalid(_, let inner) = self { return inner.rootCause }
        return self
    }

    /// What is wrong, in words a person can act on. Escaped and bounded (`UntrustedText`) whatever a detail
    /// holds: reasons travel into logs, dead-letter headers and terminals.
    public var reason: String { UntrustedText.escaped(rawReason, limit: 400) }

    var rawReason: String {
        switch self {
        case .payloadTooLarge(let size, let limit):
            "signed payload is \(size) bytes, over the \(limit)-byte limit"
        case .malformedJWS(let detail), .malformedHeader(let detail), .malformedPayload(let detail),
            .unsupportedAlgorithm(let detail), .unsupportedHeaderParameter(let detail), .invalidCertificate(let detail),
            .invalidChain(let detail), .missingAppleOID(let detail), .certificateExpiredAtSignedDate(let detail),
            .certificateNotYetValidAtSignedDate(let detail), .signatureMismatch(let detail),
            .bundleIdMismatch(let detail), .appAppleIdMismatch(let detail), .environmentMismatch(let detail),
            .environmentNotAllowed(let detail), .certificateRevoked(let detail), .revocationCheckUnavailable(let detail),
            .revocationStatusUnknown(let detail), .revocationCheckRefused(let detail), .revocationAnswerInvalid(let detail):
            detail
        case .wrongPayloadKind(let expected, let found):
            "expected a signed \(expected.rawValue), found \(found.map { "a signed \($0.rawValue)" } ?? "an unrecognised payload")"
        case .nestedInvalid(let field, let inner):
            "\(field.rawValue) is invalid: \(inner.code): \(inner.rawReason)"
        }
    }

    public var description: String { "\(code): \(reason)" }

    /// Whether the same bytes may verify later (only an online check that got no answer), here or nested.
    public var isTransient: Bool {
        if case .revocationCheckUnavailable = rootCause { return true }
        return false
    }
}

/// The nested JWS fields of a notification.
public enum NestedField: String, Sendable, Hashable, CaseIterable {
    case signedTransactionInfo
    case signedRenewalInfo
    case signedAppTransactionInfo
}

/// The kinds of signed payload the App Store produces.
public enum PayloadKind: String, Sendable, Hashable, CaseIterable {
    case notification
    case transaction
    case renewalInfo = "renewal"
    case appTransaction = "app-transaction"

    /// Tells the kind from the payload's fields. Each kind has a field the others never carry.
    public static func detect(_ payload: JSONObject) -> PayloadKind? {
        if payload["notificationType"] != nil { return .notification }
        if payload["transactionId"] != nil { return .transaction }
        if payload["receiptType"] != nil || payload["receiptCreationDate"] != nil { return .appTransaction }
        if payload["autoRenewStatus"] != nil || payload["originalTransactionId"] != nil { return .renewalInfo }
        return nil
    }
}

/// A configured trust anchor could not be loaded.
public enum TrustAnchorError: Error, Sendable, Hashable, CustomStringConvertible {
    case corruptEmbeddedRoot(String)
    case invalidRootCertificate(String)

    public var description: String {
        switch self {
        case .corruptEmbeddedRoot(let detail): "the embedded Apple Root CA - G3 is corrupt: \(detail)"
        case .invalidRootCertificate(let detail): "a configured root certificate is invalid: \(detail)"
        }
    }
}
