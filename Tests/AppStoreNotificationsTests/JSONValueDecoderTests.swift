import AppStoreNotifications
import Testing

/// The decoder the verifier uses for typed models: strict about JSON types (a number is never read as a string, nor
/// the reverse), `null` and absence both nil for optionals, a missing required key an error naming it. Each
/// primitive has its own path (the synthesized `init(from:)` calls them by type), so each is checked.
@Suite("JSONValueDecoder: typed models from parsed JSON, strictly")
struct JSONValueDecoderTests {
    struct Model: Decodable, Equatable {
        var name: String
        var note: String?
        var count: Int64?
        var small: Int32?
        var int: Int?
        var big: UInt64?
        var flag: Bool?
        var ratio: Double?
        var at: Timestamp?
    }

    static func decode(_ json: String) throws -> Model {
        try JSONValueDecoder().decode(Model.self, from: try StrictJSONParser().parse(Array(json.utf8)))
    }

    @Test("every primitive decodes from its own JSON type; null and absence are nil")
    func primitives() throws {
        let model = try Self.decode(
            #"{"name":"n","note":null,"count":9007199254740993,"small":-7,"int":42,"big":18446744073709551615,"flag":true,"ratio":0.25,"at":1700000000123}"#)
        #expect(model == Model(name: "n", note: nil, count: 9_007_199_254_740_993, small: -7, int: 42, big: .max, flag: true, ratio: 0.25,
            at: Timestamp(millisecondsSince1970: 1_700_000_000_123)))
        #expect(try Self.decode(#"{"name":"only"}"#) == Model(name: "only"))
    }

    @Test("a value of the wrong JSON type is an error, never coerced; a missing required key names itself", arguments: [
        #"{"name":1}"#, #"{"name":"n","note":2}"#, #"{"name":"n","count":"3"}"#, #"{"name":"n","small":4294967296}"#,
        #"{"name":"n","int":1.5}"#, #"{"name":"n","big":-1}"#, #"{"name":"n","flag":"true"}"#, #"{"name":"n","flag":1}"#,
        #"{"name":"n","ratio":"0.5"}"#, #"{"name":"n","at":"1700000000123"}"#, #"{"note":"no name"}"#, #"{"name":null}"#,
    ])
    func refusals(json: String) {
        #expect(throws: DecodingError.self) { try Self.decode(json) }
    }

    @Test("the error names the field")
    func errorNamesField() {
        do {
            _ = try Self.decode(#"{"name":"n","note":5}"#)
            Issue.record("decoded a number as a string")
        } catch let DecodingError.typeMismatch(_, context) {
            #expect(context.codingPath.map(\.stringValue) == ["note"])
        } catch {
            Issue.record("unexpected \(error)")
        }
    }
}
