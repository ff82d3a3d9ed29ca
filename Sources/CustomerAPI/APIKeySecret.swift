import Crypto
import Foundation

/// An API key of the customer API, as an app backend holds it: `ak_<id>_<secret>`, where `id` is public (it names
/// the key in `pipelinectl api-keys list` and logs) and `secret` is 32 random bytes, base64url. The database keeps
/// only the SHA-256 of the whole text: 256 random bits need no slow hash, and a leaked table gives no key.
///
/// Checking a presented key looks the row up by `id` and compares hashes in constant time; an unknown id is
/// compared against a fixed hash all the same, so the answer takes as long whether or not the key exists.
public struct APIKeySecret: Sendable, Hashable {
    /// `key_` + 12 hex digits.
    public let id: String
    /// The whole key, shown once at creation.
    public let text: String

    /// A new random key.
    public static func generate() -> APIKeySecret {
        var generator = SystemRandomNumberGenerator()
        let idBytes = (0..<6).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let secretBytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let id = "key_" + idBytes.map { String($0, radix: 16).leftPadded(2) }.joined()
        return APIKeySecret(id: id, text: "ak_\(id)_" + Self.base64URL(secretBytes))
    }

    /// Parses a presented key (an `Authorization: Bearer` value); nil when it is not of our shape.
    public init?(presented text: String) {
        guard text.utf8.count <= 128, text.hasPrefix("ak_key_") else { return nil }
        let parts = text.dropFirst(3).split(separator: "_", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "key", parts[1].count == 12, parts[1].allSatisfy(\.isHexDigit), parts[2].count == 43,
            parts[2].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
        else { return nil }
        self.init(id: "key_" + parts[1], text: text)
    }

    init(id: String, text: String) {
        self.id = id
        self.text = text
    }

    /// SHA-256 of the whole key: what the database stores.
    public var hash: [UInt8] { Array(SHA256.hash(data: Array(text.utf8))) }

    /// Whether `presented` hashes to `stored`, in time independent of where they differ (nil `stored`: an unknown
    /// id, compared against a fixed value so that it costs the same).
    public static func matches(_ presented: APIKeySecret?, stored: [UInt8]?) -> Bool {
        let candidate = presented?.hash ?? Array(repeating: 0, count: 32)
        let reference = stored ?? Array(repeating: 0xFF, count: 32)
        guard candidate.count == 32, reference.count == 32 else { return false }
        var difference: UInt8 = 0
        for index in 0..<32 { difference |= candidate[index] ^ reference[index] }
        return difference == 0 && presented != nil && stored != nil
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}

/// What a key may do: `read` (lookups), `write` (purchases, and reads).
public enum APIKeyScope: String, Sendable, Hashable, CaseIterable {
    /// Lookups.
    case read
    /// Purchases, and lookups.
    case write
    /// Erasures (`DELETE /v1/apps/{bundleId}/customers/{customerId}`) and their status, nothing else: a key of its
    /// own, never implied by write, so the backend component that handles privacy requests holds the only one.
    case erase
    /// Offer decisions and signatures (`POST /v1/apps/{bundleId}/customers/{customerId}/offers`), nothing else: what
    /// signs offers with the app's key is a component of its own.
    case offers

    public func allows(_ needed: APIKeyScope) -> Bool {
        switch needed {
        case .read: self == .read || self == .write
        case .write: self == .write
        case .erase: self == .erase
        case .offers: self == .offers
        }
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
