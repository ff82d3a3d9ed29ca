import AppStoreNotifications
import Crypto
import Foundation
import Synchronization

/// The bearer token every App Store Server API call carries: an ES256 JWT exactly as Apple documents it
/// (header `alg: ES256`, `kid`, `typ: JWT`; claims `iss`, `iat`, `exp`, `aud: appstoreconnect-v1`, `bid`).
///
/// Apple allows a token to be reused until it expires (at most 60 minutes after `iat`). We sign one per app
/// valid for `lifetime` (20 minutes) and reuse it until `refreshMargin` (2 minutes) before its `exp`, so a
/// request never leaves with a token that could expire in flight or on a clock a little ahead of ours. A P-256
/// signature costs tens of microseconds (measured in the note), so the cache is about not re-signing per request
/// at 50 requests/s, not about cost; the margin is what matters.
public final class AppStoreTokenSigner: Sendable {
    public static let audience = "appstoreconnect-v1"
    /// Apple refuses tokens whose `exp` is more than an hour past `iat`.
    public static let maximumLifetime: TimeInterval = 3_600

    let keyId: String
    let issuerId: String
    let signingKey: P256.Signing.PrivateKey
    let lifetime: TimeInterval
    let refreshMargin: TimeInterval
    let now: @Sendable () -> Date
    private let cache = Mutex<[String: (token: String, expires: Date)]>([:])

    public init(
        keyId: String, issuerId: String, signingKey: P256.Signing.PrivateKey, lifetime: TimeInterval = 1_200, refreshMargin: TimeInterval = 120,
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.keyId = keyId
        self.issuerId = issuerId
        self.signingKey = signingKey
        self.lifetime = min(lifetime, Self.maximumLifetime)
        self.refreshMargin = min(refreshMargin, lifetime / 2)
        self.now = now
    }

    /// A token for `bundleId`: the cached one while it has more than `refreshMargin` left, else a new one.
    public func token(bundleId: String) -> String {
        let now = now()
        if let cached = cache.withLock({ $0[bundleId] }), cached.expires.timeIntervalSince(now) > refreshMargin { return cached.token }
        let issuedAt = Int64(now.timeIntervalSince1970)
        let token = Self.sign(
            header: JSONObject(["alg": .string("ES256"), "kid": .string(keyId), "typ": .string("JWT")]),
            claims: JSONObject([
                "iss": .string(issuerId), "iat": .number(JSONNumber(issuedAt)), "exp": .number(JSONNumber(issuedAt + Int64(lifetime))),
                "aud": .string(Self.audience), "bid": .string(bundleId),
            ]),
            key: signingKey)
        cache.withLock { $0[bundleId] = (token, Date(timeIntervalSince1970: TimeInterval(issuedAt) + lifetime)) }
        return token
    }

    /// Forgets every cached token (after Apple answered 401, the next call signs anew).
    public func invalidate() {
        cache.withLock { $0.removeAll() }
    }

    /// `base64url(header).base64url(claims).base64url(r‖s)`.
    public static func sign(header: JSONObject, claims: JSONObject, key: P256.Signing.PrivateKey) -> String {
        let signingInput = Base64.encode(Array(header.serialized.utf8), alphabet: .url) + "." + Base64.encode(Array(claims.serialized.utf8), alphabet: .url)
        // Signing with a valid in-memory P-256 key does not fail; an empty signature would be refused by Apple (401).
        let signature = (try? key.signature(for: Array(signingInput.utf8)))?.rawRepresentation ?? Data()
        return signingInput + "." + Base64.encode(Array(signature), alphabet: .url)
    }
}
