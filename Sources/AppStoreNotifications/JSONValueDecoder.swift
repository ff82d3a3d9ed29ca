/// Decodes `Decodable` models from an already parsed ``JSONValue``.
///
/// Why: the verifier has parsed the payload once, strictly; decoding the typed model from that value avoids a
/// second, more lenient parse of the same bytes. It is strict about types the way Apple's own decoder is: a number
/// where a string is expected (or the other way round) is an error, never coerced.
public struct JSONValueDecoder: Sendable {
    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try T(from: Implementation(value: value, codingPath: []))
    }

    final class Implementation: Decoder {
        let value: JSONValue
        let codingPath: [any CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        init(value: JSONValue, codingPath: [any CodingKey]) {
            self.value = value
            self.codingPath = codingPath
        }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            guard case .object(let object) = value else {
                throw DecodingError.typeMismatch(
                    [String: JSONValue].self,
                    .init(codingPath: codingPath, debugDescription: "expected an object, found \(value.typeName)"))
            }
            return KeyedDecodingContainer(KeyedContainer<Key>(object: object, codingPath: codingPath))
        }

        func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
            guard case .array(let elements) = value else {
                throw DecodingError.typeMismatch(
                    [JSONValue].self,
                    .init(codingPath: codingPath, debugDescription: "expected an array, found \(value.typeName)"))
            }
            return UnkeyedContainer(elements: elements, codingPath: codingPath)
        }

        func singleValueContainer() throws -> any SingleValueDecodingContainer {
            SingleValueContainer(value: value, codingPath: codingPath)
        }
    }

    /// Converts one JSON value to a primitive, or nil when `T` is not a primitive this decoder handles directly.
    /// `codingPath` is evaluated only to describe an error: building paths eagerly costs more than decoding.
    static func primitive<T>(_ type: T.Type, from value: JSONValue, codingPath: () -> [any CodingKey]) throws -> T? {
        func mismatch(_ expected: String) -> DecodingError {
            .typeMismatch(T.self, .init(codingPath: codingPath(), debugDescription: "expected \(expected), found \(value.typeName)"))
        }
        func integer<I: FixedWidthInteger>(_: I.Type) throws -> I {
            guard case .number(let number) = value else { throw mismatch("an integer") }
            guard let exact = I(number.literal) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: codingPath(), debugDescription: "\(number.literal) is not an integer that fits \(I.self)"))
            }
            return exact
        }
        switch type {
        case is String.Type:
            guard case .string(let string) = value else { throw mismatch("a string") }
            return string as? T
        case is Bool.Type:
            guard case .bool(let bool) = value else { throw mismatch("a boolean") }
            return bool as? T
        case is Int64.Type: return try integer(Int64.self) as? T
        case is Timestamp.Type: return Timestamp(millisecondsSince1970: try integer(Int64.self)) as? T
        case is Int32.Type: return try integer(Int32.self) as? T
        case is Int.Type: return try integer(Int.self) as? T
        case is UInt64.Type: return try integer(UInt64.self) as? T
        case is Double.Type:
            guard case .number(let number) = value, let double = number.doubleValue else { throw mismatch("a number") }
            return double as? T
        case is JSONValue.Type:
            return value as? T
        default:
            return nil
        }
    }

    static func decodeValue<T: Decodable>(_ type: T.Type, from value: JSONValue, codingPath: () -> [any CodingKey]) throws -> T {
        if let primitive = try primitive(type, from: value, codingPath: codingPath) { return primitive }
        return try T(from: Implementation(value: value, codingPath: codingPath()))
    }

    struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let object: JSONObject
        let codingPath: [any CodingKey]

        var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }

        func contains(_ key: Key) -> Bool { object[key.stringValue] != nil }

        func decodeNil(forKey key: Key) throws -> Bool {
            guard let value = object[key.stringValue] else { return true }
            return value == .null
        }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(type, forKey: key) }
        func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? { try valueIfPresent(type, forKey: key) }

        // The primitives by name, each one look-up. Without them, a synthesized `init(from:)` reaches the standard
        // library's default `decodeIfPresent(String.self, …)`, which looks the key up three times (`contains`,
        // `decodeNil`, `decode`): the typed decode of a notification's three models cost more than their JSON
        // parse (`verify-bench`: 17.8 µs, 12.3-13.0 µs with these).
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(type, forKey: key) }
        func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try valueIfPresent(type, forKey: key) }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(type, forKey: key) }
        func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try valueIfPresent(type, forKey: key) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(type, forKey: key) }
        func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try valueIfPresent(type, forKey: key) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(type, forKey: key) }
        func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { try valueIfPresent(type, forKey: key) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(type, forKey: key) }
        func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try valueIfPresent(type, forKey: key) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(type, forKey: key) }
        func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? { try valueIfPresent(type, forKey: key) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(type, forKey: key) }
        func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? { try valueIfPresent(type, forKey: key) }

        private func value<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            guard let value = object[key.stringValue] else {
                throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "missing \(key.stringValue)"))
            }
            return try JSONValueDecoder.decodeValue(type, from: value, codingPath: { codingPath + [key] })
        }

        private func valueIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
            guard let value = object[key.stringValue], value != .null else { return nil }
            return try JSONValueDecoder.decodeValue(type, from: value, codingPath: { codingPath + [key] })
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            try Implementation(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key]).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try Implementation(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key]).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder { Implementation(value: .object(object), codingPath: codingPath) }
        func superDecoder(forKey key: Key) throws -> any Decoder {
            Implementation(value: object[key.stringValue] ?? .null, codingPath: codingPath + [key])
        }
    }

    struct UnkeyedContainer: UnkeyedDecodingContainer {
        let elements: [JSONValue]
        let codingPath: [any CodingKey]
        var currentIndex = 0

        init(elements: [JSONValue], codingPath: [any CodingKey]) {
            self.elements = elements
            self.codingPath = codingPath
        }

        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        struct IndexKey: CodingKey {
            var stringValue: String { String(intValue!) }
            var intValue: Int?
            init(_ index: Int) { intValue = index }
            init?(stringValue: String) { nil }
            init?(intValue: Int) { self.intValue = intValue }
        }

        mutating func next() throws -> (JSONValue, [any CodingKey]) {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(JSONValue.self, .init(codingPath: codingPath, debugDescription: "array exhausted"))
            }
            defer { currentIndex += 1 }
            return (elements[currentIndex], codingPath + [IndexKey(currentIndex)])
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd, elements[currentIndex] == .null else { return false }
            currentIndex += 1
            return true
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            let (value, path) = try next()
            return try JSONValueDecoder.decodeValue(type, from: value, codingPath: { path })
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            let (value, path) = try next()
            return try Implementation(value: value, codingPath: path).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let (value, path) = try next()
            return try Implementation(value: value, codingPath: path).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder {
            let (value, path) = try next()
            return Implementation(value: value, codingPath: path)
        }
    }

    struct SingleValueContainer: SingleValueDecodingContainer {
        let value: JSONValue
        let codingPath: [any CodingKey]

        func decodeNil() -> Bool { value == .null }

        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            try JSONValueDecoder.decodeValue(type, from: value, codingPath: { codingPath })
        }
    }
}
