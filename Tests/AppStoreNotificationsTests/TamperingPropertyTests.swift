import AppStoreNotifications
import TestSupport
import Testing

/// Any single-byte change anywhere in a valid JWS must be refused.
@Suite("Tampering")
struct TamperingPropertyTests {
    /// A small deterministic generator, so a failure names a reproducible position.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state ^ (state >> 29)
        }
    }

    @Test("every byte of a signed transaction, and sampled bytes of a full notification")
    func singleByteChanges() async throws {
        let authority = try TestCertificateAuthority()
        let chain = try authority.issueChain()
        let minter = NotificationMinter(chain: chain)
        let event = NotificationMinter.SubscriptionEvent.sample(seed: 11, signedDate: TestDates.milliseconds("2026-05-05T05:05:05Z"))
        let verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))

        let transaction = chain.sign(minter.transaction(event))
        let notification = minter.signedNotification(event)
        _ = try await verifier.verifyTransaction(transaction)
        _ = try await verifier.verifyNotification(notification)

        // Every byte of the transaction (header, x5c, payload, signature); the notification, whose nested
        // JWSs make it ten times longer, at 1000 seeded random positions.
        let transactionBytes = Array(transaction.utf8)
        var positions: [(String, Int)] = transactionBytes.indices.map { ("transaction", $0) }
        var generator = SeededGenerator(state: 42)
        let notificationBytes = Array(notification.utf8)
        positions += (0..<1000).map { _ in ("notification", Int.random(in: 0..<notificationBytes.count, using: &generator)) }

        let replacements: [UInt8] = [UInt8(ascii: "A"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "="), 0xFF]
        var accepted: [String] = []
        for (index, (which, position)) in positions.enumerated() {
            var bytes = which == "transaction" ? transactionBytes : notificationBytes
            var replacement = replacements[index % replacements.count]
            if replacement == bytes[position] { replacement = UInt8(ascii: "B") == bytes[position] ? UInt8(ascii: "C") : UInt8(ascii: "B") }
            bytes[position] = replacement
            let tampered = String(decoding: bytes, as: UTF8.self)
            do {
                if which == "transaction" {
                    _ = try await verifier.verifyTransaction(tampered)
                } else {
                    _ = try await verifier.verifyNotification(tampered)
                }
                accepted.append("\(which)@\(position)=\(replacement)")
            } catch {}
        }
        #expect(accepted.isEmpty, "tampered JWSs accepted: \(accepted.prefix(10))")
        #expect(positions.count == transactionBytes.count + 1000 && transactionBytes.count > 1500)
    }
}
