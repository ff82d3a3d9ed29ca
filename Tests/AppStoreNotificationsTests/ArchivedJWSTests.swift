import AppStoreNotifications
import Foundation
import TestSupport
import Testing

/// The archive's taken-apart form (ArchivedJWS) must give back the exact signed payload, byte for byte, for every
/// real Apple payload and every minted one, store each certificate chain once, and refuse (nil: archived raw)
/// whatever it could not rebuild exactly.
@Suite("Archived JWS: taken apart and rebuilt byte for byte")
struct ArchivedJWSTests {
    static func signedPayload(of vector: VectorFile) -> String? {
        let object = vector.object
        return object["signedPayload"]?.stringValue ?? object["signedTransaction"]?.stringValue ?? object["signedRenewalInfo"]?.stringValue
    }

    @Test("every real Apple payload rebuilds exactly; nested JWSs are taken out of the notifications")
    func realPayloads() throws {
        try Fixtures.requireVectors()
        var notificationsWithNested = 0
        for vector in AppleRealVectorTests.vectors {
            let jws = try #require(Self.signedPayload(of: vector))
            let archived = try #require(ArchivedJWS.decompose(jws), "\(vector): not taken apart")
            #expect(archived.signedPayload(header: { archived.headers[$0] }) == jws)
            #expect(!archived.outer.payload.contains("eyJ"), "a nested JWS stayed in the outer payload")
            if !archived.nested.isEmpty { notificationsWithNested += 1 }
            // What is stored per row is far smaller than the JWS; the headers are shared between rows.
            let row = archived.outer.payload.utf8.count + archived.nested.reduce(0) { $0 + $1.payload.utf8.count + $1.signature.utf8.count }
            #expect(row * 2 < jws.utf8.count, "\(vector): \(row) bytes per row for a \(jws.utf8.count)-byte JWS")
        }
        #expect(notificationsWithNested > 0)
    }

    @Test("minted lifecycles: one chain for every notification, each rebuilt exactly")
    func mintedLifecycles() throws {
        let minter = NotificationMinter(chain: try TestCertificateAuthority().issueChain())
        var headers: [[UInt8]: String] = [:]
        var count = 0
        for event in NotificationMinter.lifecycleEvents(subscriptions: 5) {
            do {
                let notification = minter.signedNotification(event)
                let archived = try #require(ArchivedJWS.decompose(notification))
                headers.merge(archived.headers) { first, _ in first }
                #expect(archived.signedPayload(header: { headers[$0] }) == notification)
                #expect(archived.nested.count >= 1)
                count += 1
            }
        }
        #expect(count > 5)
        #expect(headers.count == 1, "one test chain signs everything: \(headers.count) distinct headers")
    }

    @Test("not taken apart: not a JWS, a payload holding the placeholder's text, a non-canonical or non-UTF-8 payload")
    func refusals() {
        #expect(ArchivedJWS.decompose("{\"not\": \"a jws\"}") == nil)
        #expect(ArchivedJWS.decompose("a.b") == nil)
        #expect(ArchivedJWS.decompose("a..c") == nil)
        let header = Base64.encode(Array(#"{"alg":"ES256"}"#.utf8), alphabet: .url)
        let placeholder = Base64.encode(Array(#"{"x":"\u00010"}"#.utf8), alphabet: .url)
        #expect(ArchivedJWS.decompose("\(header).\(placeholder).sig") == nil)
        #expect(ArchivedJWS.decompose("\(header).\(Base64.encode([0xFF, 0xFE, 0x7B], alphabet: .url)).sig") == nil)
        // "eyE" and "eyF" decode to the same bytes only when trailing bits are ignored: the strict decoder refuses the second.
        #expect(ArchivedJWS.decompose("\(header).eyF.sig") == nil)
        // A plain payload without nested JWSs is taken apart and rebuilt.
        let plain = "\(header).\(Base64.encode(Array(#"{"a":1}"#.utf8), alphabet: .url)).sig"
        let archived = ArchivedJWS.decompose(plain)
        #expect(archived?.nested.isEmpty == true && archived?.outer.payload == #"{"a":1}"#)
    }

    @Test("a nested string that is not a JWS, or escapes, stays as it is")
    func nestedLookalikes() throws {
        let header = Base64.encode(Array(#"{"alg":"ES256","x5c":["\#(String(repeating: "A", count: 100))"]}"#.utf8), alphabet: .url)
        let nested = "\(header).\(Base64.encode(Array(#"{"t":2}"#.utf8), alphabet: .url)).c2ln"
        let lookalike = "eyJ" + String(repeating: "A", count: 80) + ".x"  // two segments only
        let json = #"{"data":{"signedTransactionInfo":"\#(nested)","note":"\#(lookalike)","q":"a\"eyJ.b.c"}}"#
        let jws = "\(header).\(Base64.encode(Array(json.utf8), alphabet: .url)).c2ln"
        let archived = try #require(ArchivedJWS.decompose(jws))
        #expect(archived.nested.count == 1 && archived.nested.first?.payload == #"{"t":2}"#)
        #expect(archived.outer.payload.contains(lookalike))
        #expect(archived.signedPayload(header: { archived.headers[$0] }) == jws)
    }

    @Test("a nested JWS whose payload holds U+0001 or whose signature is not base64url stays in the outer payload (the archive's separators)")
    func nestedSeparators() throws {
        let header = Base64.encode(Array(#"{"alg":"ES256","x5c":["\#(String(repeating: "A", count: 100))"]}"#.utf8), alphabet: .url)
        let controlled = "\(header).\(Base64.encode(Array("{\"t\":\"a\u{1}b\"}".utf8), alphabet: .url)).c2ln"
        let comma = "\(header).\(Base64.encode(Array(#"{"t":3}"#.utf8), alphabet: .url)).c2,ln"
        let fine = "\(header).\(Base64.encode(Array(#"{"t":4}"#.utf8), alphabet: .url)).c2ln"
        let json = #"{"a":"\#(controlled)","b":"\#(comma)","c":"\#(fine)"}"#
        let jws = "\(header).\(Base64.encode(Array(json.utf8), alphabet: .url)).c2ln"
        let archived = try #require(ArchivedJWS.decompose(jws))
        #expect(archived.nested.map(\.payload) == [#"{"t":4}"#])
        #expect(archived.outer.payload.contains(controlled) && archived.outer.payload.contains(comma))
        #expect(archived.signedPayload(header: { archived.headers[$0] }) == jws)
    }
}
