/// A JSON document as it was written, for values whose exact content matters.
///
/// Why not `[String: Any]` or Foundation's `JSONSerialization`: we must re-emit what Apple signed with integers
/// exact (a 64-bit id through a `Double` loses digits), keep fields we do not know yet (Apple adds fields every
/// year and we store them as jsonb), and keep key order so output is stable. Numbers therefore keep their literal
/// text and objects keep their members in document order.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The object, if this value is one.
    public var objectValue: JSONObject? {
        if case .object(let object) = self { return object }
        return nil
    }

    /// The elements, if this value is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The string, if this value is one.
    public var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }

    /// The number's literal as an exact 64-bit integer, if this value is an integral number that fits.
    public var int64Value: Int64? {
        if case .number(let number) = self { return number.int64Value }
        return nil
    }

    /// A short name of the JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .number: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

/// A JSON number kept as its literal text (RFC 8259 grammar, already validated by the parser).
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    /// The literal exactly as it appeared in the document, e.g. `1234567890`, `-0.5`, `1e3`.
    public let literal: String

    public init(literal: String) { self.literal = literal }

    public init(_ value: Int64) { self.literal = String(value) }

    /// The value as an exact integer: nil for fractions, exponents and out-of-range values.
    public var int64Value: Int64? { Int64(literal) }

    /// The value as a binary floating-point number (may round).
    public var doubleValue: Double? { Double(literal) }

    public var description: String { literal }
}

/// A JSON object with its members in document order. Keys are unique (the parser rejects duplicates).
public struct JSONObject: Sendable, Hashable, Sequence {
    public struct Member: Sendable, Hashable {
        public var key: String
        public var value: JSONValue
        public init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    public private(set) var members: [Member]

    public init(members: [Member] = []) { self.members = members }

    public init(_ pairs: KeyValuePairs<String, JSONValue>) {
        self.members = pairs.map { Member(key: $0.key, value: $0.value) }
    }

    /// The value of `key`, or nil when absent. Linear: App Store objects have a few dozen keys at most.
    public subscript(key: String) -> JSONValue? {
        get { members.first(where: { $0.key == key })?.value }
        set {
            if let index = members.firstIndex(where: { $0.key == key }) {
                if let newValue { members[index].value = newValue } else { members.remove(at: index) }
            } else if let newValue {
                members.append(Member(key: key, value: newValue))
            }
        }
    }

    public var keys: [String] { members.map(\.key) }
    public var count: Int { members.count }

    public func makeIterator() -> IndexingIterator<[Member]> { members.makeIterator() }
}

// MARK: - Serialization

extension JSONValue {
    /// Compact JSON text (no insignificant whitespace), numbers as their original literals.
    public var serialized: String {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        write(to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Appends the compact JSON text of this value to `output`.
    public func write(to output: inout [UInt8]) {
        switch self {
        case .null:
            output.append(contentsOf: "null".utf8)
        case .bool(let value):
            output.append(contentsOf: (value ? "true" : "false").utf8)
        case .number(let number):
            output.append(contentsOf: number.literal.utf8)
        case .string(let string):
            JSONValue.writeString(string, to: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                element.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            output.append(UInt8(ascii: "{"))
            for (index, member) in object.members.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                JSONValue.writeString(member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// Appends `string` as a JSON string literal: quotes, backslashes and control characters escaped,
    /// everything else as raw UTF-8. Runs that need no escape are copied whole (the archive rows carry
    /// kilobytes of base64 per notification; byte-by-byte appends were a tenth of the worker's time).
    public static func writeString(_ string: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { bytes in
            var runStart = 0
            for index in bytes.indices {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                runStart = index + 1
                switch byte {
                case UInt8(ascii: "\""): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
                case UInt8(ascii: "\\"): output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
                case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
                case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
                case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
                default:
                    output.append(contentsOf: "\\u00".utf8)
                    output.append(hexDigit(byte >> 4))
                    output.append(hexDigit(byte & 0x0F))
                }
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
        output.append(UInt8(ascii: "\""))
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10 }
}

extension JSONObject {
    /// Compact JSON text of this object.
    public var serialized: String { JSONValue.object(self).serialized }
}

// MARK: - Codable

/// `JSONValue` is Codable so that models can hold open-ended sub-objects (e.g. `advancedCommerceInfo`) verbatim.
extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        if let decoder = decoder as? JSONValueDecoder.Implementation {
            self = decoder.value
            return
        }
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .number(JSONNumber(value))
        } else if let value = try? container.decode(Double.self) {
            self = .number(JSONNumber(literal: String(value)))
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            let members = try container.decode([String: JSONValue].self)
            self = .object(JSONObject(members: members.sorted { $0.key < $1.key }.map { .init(key: $0.key, value: $0.value) }))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let number):
            if let integer = number.int64Value { try container.encode(integer) } else { try container.encode(number.doubleValue ?? 0) }
        case .string(let value): try container.encode(value)
        case .array(let elements): try container.encode(elements)
        case .object(let object):
            try container.encode(Dictionary(uniqueKeysWithValues: object.members.map { ($0.key, $0.value) }))
        }
    }
}
