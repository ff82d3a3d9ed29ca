import Crypto
import Foundation

/// Signing as the [Standard Webhooks](https://www.standardwebhooks.com) specification says: the secret is
/// `whsec_` + base64 of random bytes; the signed content is `webhook-id.webhook-timestamp.body`; the signature
/// header is space-separated `v1,<base64 HMAC-SHA256>` entries, one per secret that currently signs (two during a
/// rotation's overlap), so a receiver using any Standard Webhooks library verifies it.
package enum WebhookSignature {
    package static let secretPrefix = "whsec_"

    /// A new secret: 32 random bytes (the spec allows 24 to 64).
    package static func generateSecret() -> String {
        secretPrefix + Data(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }).base64EncodedString()
    }

    /// The key bytes of a `whsec_…` secret; nil when it is not one.
    package static func keyBytes(_ secret: String) -> [UInt8]? {
        guard secret.hasPrefix(secretPrefix), let data = Data(base64Encoded: String(secret.dropFirst(secretPrefix.count))), !data.isEmpty else { return nil }
        return Array(data)
    }

    /// `v1,<base64>` for one secret.
    package static func sign(id: String, timestamp: Int64, body: [UInt8], secret: String) -> String? {
        guard let key = keyBytes(secret) else { return nil }
        var content = Array("\(id).\(timestamp).".utf8)
        content += body
        let mac = HMAC<SHA256>.authenticationCode(for: content, using: SymmetricKey(data: key))
        return "v1," + Data(mac).base64EncodedString()
    }

    /// The `webhook-signature` header: one entry per secret, space-separated.
    package static func header(id: String, timestamp: Int64, body: [UInt8], secrets: [String]) -> String {
        secrets.compactMap { sign(id: id, timestamp: timestamp, body: body, secret: $0) }.joined(separator: " ")
    }

    /// A receiver's check: some `v1` entry of `header` is the signature under `secret` (compared in constant
    /// time) and the timestamp is within `tolerance` of `now`.
    package static func verify(id: String, timestamp: Int64, body: [UInt8], header: String, secret: String, now: Int64, tolerance: Int64 = 300) -> Bool {
        guard abs(now - timestamp) <= tolerance, let expected = sign(id: id, timestamp: timestamp, body: body, secret: secret) else { return false }
        let wanted = Array(expected.utf8)
        return header.split(separator: " ").contains { entry in
            let presented = Array(entry.utf8)
            guard presented.count == wanted.count else { return false }
            var difference: UInt8 = 0
            for (a, b) in zip(presented, wanted) { difference |= a ^ b }
            return difference == 0
        }
    }
}
