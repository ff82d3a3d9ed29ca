import Foundation
import AppStoreNotifications
import Testing

@Suite("Strict JSON")
struct StrictJSONParserTests {
    let parser = StrictJSONParser()

    func isRejected(_ text: String) -> Bool {
        (try? parser.parse(Array(text.utf8))) == nil
    }

    @Test("accepts RFC 8259 and keeps integers and key order exactly")
    func exactValues() throws {
        let text = #"{"b":9007199254740993,"a":-0.5e-3,"s":"\u00e9\ud83d\ude00\n","n":null,"t":[true,false,{}]}"#
        let value = try parser.parse(Array(text.utf8))
        #expect(value.objectValue?.keys == ["b", "a", "s", "n", "t"])
        #expect(value.objectValue?["b"]?.int64Value == 9_007_199_254_740_993)
        #expect(value.objectValue?["s"]?.stringValue == "é😀\n")
        #expect(value.serialized == #"{"b":9007199254740993,"a":-0.5e-3,"s":"é😀\n","n":null,"t":[true,false,{}]}"#)
        #expect(try parser.parse(Array(value.serialized.utf8)) == value)
    }

    @Test(
        "rejects every second spelling",
        arguments: [
            #"{"a":1,"a":2}"#, "\u{FEFF}{}", #"{"a":NaN}"#, #"{"a":Infinity}"#, #"{"a":01}"#, #"{"a":1,}"#, "[1,]",
            #"{"a":1} x"#, #"{'a':1}"#, "{\"a\":\"\u{01}\"}", #"{"a":"\ud800"}"#, #"{"a":"\udc00"}"#, #"{"a":"\x"}"#,
            "/* c */{}", #"{"a":.5}"#, #"{"a":1.}"#, #"{"a":-}"#, "", " ", #"{"a""#, "nul", "{\"a\":1}\u{0}",
        ])
    func rejects(_ text: String) {
        #expect(isRejected(text))
    }

    @Test("refuses numbers beyond a 64-bit float, as Foundation does (a fuzzer finding); keeps long exact integers and tiny exponents")
    func numberRange() throws {
        for text in ["1e114444444444444444411", "1e400", "-1E+309", String(repeating: "9", count: 400)] {
            #expect(throws: JSONParseError.self, "\(text.prefix(30))") { try StrictJSONParser().parse(Array(text.utf8)) }
        }
        for text in ["2000000123456789012", "1e308", "1e-400", "123456789012345678901234567890", "0.5e2"] {
            #expect(try StrictJSONParser().parse(Array(text.utf8)) == .number(JSONNumber(literal: text)), "\(text)")
        }
    }

    @Test("rejects invalid UTF-8 and UTF-16")
    func encodings() {
        #expect((try? parser.parse([0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xC3, 0x28, 0x22, 0x7D])) == nil)
        #expect((try? parser.parse(Array("{}".utf16).flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })) == nil)
    }

    @Test("bounds nesting instead of exhausting the stack")
    func depth() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(isRejected(deep))
        let fine = String(repeating: "[", count: 60) + String(repeating: "]", count: 60)
        #expect(!isRejected(fine))
    }

    @Test("the 8-bytes-at-a-time string scan finds quotes, escapes and control bytes at every position")
    func wordScan() throws {
        for length in 0..<40 {
            for position in 0...length {
                let prefix = String(repeating: "a", count: position)
                let suffix = String(repeating: "b", count: length - position)
                // An escaped quote and an escaped newline decode exactly.
                let escaped = try parser.parse(Array("[\"\(prefix)\\\"\(suffix)\",\"\(prefix)\\n\(suffix)\"]".utf8))
                #expect(escaped == .array([.string(prefix + "\"" + suffix), .string(prefix + "\n" + suffix)]))
                // A raw control byte anywhere is refused; a string ends exactly at its quote.
                #expect(isRejected("[\"\(prefix)\u{01}\(suffix)\"]"))
                #expect(try parser.parse(Array("[\"\(prefix)\",\"\(suffix)\"]".utf8)) == .array([.string(prefix), .string(suffix)]))
                // Non-ASCII text is not mistaken for a control byte.
                #expect(try parser.parse(Array("\"\(prefix)é€😀\(suffix)\"".utf8)) == .string(prefix + "é€😀" + suffix))
            }
        }
    }

    @Test("duplicate detection also works for large objects")
    func largeObjectDuplicates() {
        let members = (0..<40).map { "\"k\($0)\":\($0)" }
        #expect(!isRejected("{" + members.joined(separator: ",") + "}"))
        #expect(isRejected("{" + (members + ["\"k3\":0"]).joined(separator: ",") + "}"))
    }
}

@Suite("Strict base64")
struct Base64Tests {
    @Test("round trips every length in both alphabets")
    func roundTrip() {
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            for alphabet in [Base64.Alphabet.standard, .url] {
                #expect(Base64.decode(Base64.encode(bytes, alphabet: alphabet), alphabet: alphabet) == bytes)
            }
        }
    }

    @Test("encodes as RFC 4648's reference does, from any sequence")
    func encodeMatchesReference() {
        // Foundation's encoder is the reference for the standard alphabet; base64url is its translation, unpadded.
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 53 &+ 7) }
            let reference = Data(bytes).base64EncodedString()
            #expect(Base64.encode(bytes, alphabet: .standard) == reference)
            #expect(Base64.encode(bytes.lazy.map { $0 }, alphabet: .standard) == reference, "a non-contiguous sequence")
            let url = reference.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Base64.encode(bytes[...], alphabet: .url) == url)
        }
    }

    @Test("accepts exactly one spelling")
    func canonical() {
        #expect(Base64.decode("YQ", alphabet: .url) == [0x61])
        #expect(Base64.decode("YQ==", alphabet: .url) == nil)  // padding in base64url
        #expect(Base64.decode("YR", alphabet: .url) == nil)  // non-zero unused bits
        #expect(Base64.decode("YQ", alphabet: .standard) == nil)  // missing padding
        #expect(Base64.decode("YQ==", alphabet: .standard) == [0x61])
        #expect(Base64.decode("+/", alphabet: .url) == nil)
        #expect(Base64.decode("-_", alphabet: .standard) == nil)
        #expect(Base64.decode("Y", alphabet: .url) == nil)
        #expect(Base64.decode("YQ=a", alphabet: .standard) == nil)
        #expect(Base64.decode("Y Q", alphabet: .url) == nil)
    }
}
