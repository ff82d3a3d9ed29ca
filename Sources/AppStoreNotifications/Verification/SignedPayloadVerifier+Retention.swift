import Crypto
import Foundation

/// Apple's [Get Retention Message](https://developer.apple.com/documentation/retentionmessaging/get-retention-message)
/// request, verified: the App Store asks, in real time, which retention message to show a subscriber about to cancel.
public struct VerifiedRealtimeRequest: Sendable, Hashable {
    public var originalTransactionId: String
    public var appAppleId: Int64?
    public var productId: String?
    /// The device's locale (`en-US`).
    public var locale: String?
    /// Apple's UUID for this request.
    public var requestIdentifier: String
    public var environment: Environment
    public var signedDate: Timestamp
    /// The payload as Apple signed it.
    public var json: JSONObject
}

extension SignedPayloadVerifier {
    /// The longest a real-time request may have been signed before we answer it: Apple waits about a second for the
    /// answer, so an older one is a replay (stricter than Apple's library, which checks no age).
    public static let realtimeRequestMaximumAge: TimeInterval = 300

    /// Verifies the `signedPayload` of a Get Retention Message request for `bundleId` (the app whose real-time URL it
    /// was sent to) as strictly as a notification: structure, the chain to the configured roots and the signature at
    /// `signedDate`, an environment Apple signs, the app's App Apple ID (required in Production, as Apple's library
    /// requires it), the app configured for that environment, and a signed date neither in the future nor older than
    /// `realtimeRequestMaximumAge`.
    public func verifyRealtimeRequest(_ signedPayload: String, bundleId: String, now: Date = Date()) async throws(VerificationError) -> VerifiedRealtimeRequest {
        let parsed = try parse(signedPayload)
        let payload = parsed.payload
        guard let requestIdentifier = payload["requestIdentifier"]?.stringValue, !requestIdentifier.isEmpty else {
            throw .malformedPayload("a real-time request carries a requestIdentifier")
        }
        guard let originalTransactionId = payload["originalTransactionId"]?.stringValue, !originalTransactionId.isEmpty else {
            throw .malformedPayload("a real-time request carries an originalTransactionId")
        }
        guard let milliseconds = payload["signedDate"]?.int64Value else { throw .malformedPayload("a real-time request carries a signedDate in milliseconds") }
        let signedDate = Timestamp(millisecondsSince1970: milliseconds)
        // The environment before any cryptography: a locally signed one is refused outright (no signature to check).
        let environment = try knownEnvironment(payload["environment"]?.stringValue, of: "the real-time request")
        guard environment.isSignedByApple else {
            throw .environmentNotAllowed("a real-time request comes from the App Store, never from a local environment")
        }
        let leafKey = try await verifiedLeafKey(x5c: parsed.x5c, signedDate: signedDate)
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: parsed.signature), leafKey.isValidSignature(signature, for: parsed.digest) else {
            throw .signatureMismatch("the ES256 signature does not verify with the leaf certificate's key")
        }
        try await checkOnlineIfDue(x5c: parsed.x5c, signedDate: signedDate)
        let appAppleId = payload["appAppleId"]?.int64Value
        _ = try checkIdentity(bundleId: bundleId, appAppleId: appAppleId, checksAppAppleId: true, environment: environment.rawValue, of: "the real-time request")
        let age = now.timeIntervalSince(signedDate.date)
        guard age >= -60 else { throw .malformedPayload("the real-time request is signed \(Int(-age)) s in the future") }
        guard age <= Self.realtimeRequestMaximumAge else {
            throw .malformedPayload("the real-time request was signed \(Int(age)) s ago; Apple waits a second for the answer, so this is a replay")
        }
        return VerifiedRealtimeRequest(
            originalTransactionId: originalTransactionId, appAppleId: appAppleId, productId: payload["productId"]?.stringValue,
            locale: payload["locale"]?.stringValue, requestIdentifier: requestIdentifier, environment: environment, signedDate: signedDate, json: payload)
    }
}
