import AppStoreNotifications
import TestSupport
import Testing

/// Attacker text on its way to logs, dead-letter headers and terminals: the exact inputs that once wrote a forged
/// `critical` line, ANSI escapes and a 190 KB line.
@Suite("Untrusted text in reasons")
struct UntrustedTextTests {
    let verifier: SignedPayloadVerifier

    init() throws {
        let authority = try TestCertificateAuthority()
        verifier = try SignedPayloadVerifier(configuration: .init(apps: [AppIdentity(bundleId: "com.example.app", appAppleId: 1)], trustedRoots: [authority.rootDER]))
    }

    /// A JWS whose protected header is `header` verbatim.
    func jws(header: String) -> String {
        let segment = { (text: String) in Base64.encode(Array(text.utf8), alphabet: .url) }
        return segment(header) + "." + segment(#"{"signedDate":1}"#) + "." + Base64.encode([UInt8](repeating: 1, count: 64), alphabet: .url)
    }

    func reason(of jws: String) async -> String? {
        do {
            _ = try await verifier.verifyNotification(jws)
            return nil
        } catch {
            return error.reason
        }
    }

    static func isClean(_ text: String) -> Bool {
        !text.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
    }

    @Test("a duplicated header key with a newline and ANSI escapes: escaped and bounded in the reason")
    func duplicateKeyInjection() async throws {
        let key = #"x\ncritical: forged\u001b[2J\u001b[31mred"#
        let reason = try #require(await reason(of: jws(header: #"{"alg":"ES256",""# + key + #"":1,""# + key + #"":2}"#)))
        #expect(Self.isClean(reason), "\(reason)")
        #expect(reason.contains("duplicate key") && reason.contains(#"\n"#) && reason.contains(#"\u{1B}"#), "\(reason)")
        #expect(reason.count < 200, "\(reason.count) characters")
    }

    @Test("a 190 KB alg: a bounded reason with a truncation marker")
    func hugeAlgorithm() async throws {
        let alg = String(repeating: "A", count: 190_000)
        let reason = try #require(await reason(of: jws(header: #"{"alg":""# + alg + #"","x5c":[]}"#)))
        #expect(reason.count < 200 && reason.contains("…(+"), "\(reason.prefix(300))")
    }

    @Test("escaping: control characters, C1, bidi overrides and ESC; printable text unchanged")
    func escaping() {
        #expect(UntrustedText.escaped("plain text: ok") == "plain text: ok")
        #expect(UntrustedText.escaped("a\nb\r\u{1B}[31m\u{9B}\u{202E}") == #"a\nb\r\u{1B}[31m\u{9B}\u{202E}"#)
        #expect(UntrustedText.quoted("say \"hi\"\\") == #""say \"hi\"\\""#)
        #expect(UntrustedText.escaped(String(repeating: "x", count: 50), limit: 10) == "xxxxxxxxxx…(+40 characters)")
    }
}
