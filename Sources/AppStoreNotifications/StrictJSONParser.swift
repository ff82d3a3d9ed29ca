/// Why a document is not the strict JSON we accept.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset in the document where the problem was found.
    public var offset: Int
    /// What is wrong, in words a person can act on.
    public var reason: String

    public var description: String { "\(reason) at byte \(offset)" }
}

/// An RFC 8259 JSON parser that accepts exactly one spelling of each document.
///
/// Stricter than most parsers, on purpose: the signature covers bytes, but every consumer acts on the *parsed*
/// value, so any ambiguity in parsing is an ambiguity in what was signed. Rejected here, and accepted by at least
/// one popular parser: duplicate keys (first-wins and last-wins parsers disagree), a byte-order mark, UTF-16,
/// invalid UTF-8, lone surrogate escapes, `NaN`/`Infinity`, leading zeros, trailing commas, comments, control
/// characters in strings, and anything after the value. Nesting is bounded so hostile input cannot exhaust the
/// stack.
public struct StrictJSONParser: Sendable {
    /// Deepest nesting of arrays and objects accepted. App Store payloads nest 3 levels.
    public var maximumDepth: Int

    public init(maximumDepth: Int = 64) {
        self.maximumDepth = maximumDepth
    }

    /// Parses a complete document.
    public func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in
            try parse(buffer)
        }
    }

    /// Parses a complete document from raw bytes.
    public func parse(_ buffer: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> JSONValue {
        var reader = Reader(bytes: buffer, maximumDepth: maximumDepth)
        if buffer.count >= 3, buffer[0] == 0xEF, buffer[1] == 0xBB, buffer[2] == 0xBF {
            throw JSONParseError(offset: 0, reason: "document starts with a UTF-8 byte-order mark")
        }
        reader.skipWhitespace()
        let value = try reader.parseValue(depth: 0)
        reader.skipWhitespace()
        guard reader.index == buffer.count else {
            throw JSONParseError(offset: reader.index, reason: "unexpected data after the JSON value")
        }
        return value
    }

    /// Parses a document whose top level must be an object.
    public func parseObject(_ buffer: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> JSONObject {
        let value = try parse(buffer)
        guard case .object(let object) = value else {
            throw JSONParseError(offset: 0, reason: "expected a JSON object, found \(value.typeName)")
        }
        return object
    }

    /// Parses a document whose top level must be an object.
    public func parseObject(_ bytes: [UInt8]) throws(JSONParseError) -> JSONObject {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONObject in try parseObject(buffer) }
    }
}

extension StrictJSONParser {
    fileprivate struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        let maximumDepth: Int
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) {
            self.bytes = bytes
            self.maximumDepth = maximumDepth
        }

        func fail(_ reason: String, at offset: Int? = nil) -> JSONParseError {
            JSONParseError(offset: offset ?? index, reason: reason)
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
            guard index < bytes.count else { throw fail("unexpected end of document") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return .object(try parseObject(depth: depth + 1))
            case UInt8(ascii: "["): return .array(try parseArray(depth: depth + 1))
            case UInt8(ascii: "\""): return .string(try parseString())
            case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
            case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
            case UInt8(ascii: "n"): try expectLiteral("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
            case 0x00:
                throw fail("NUL byte where a value was expected (UTF-16 or binary data is not JSON)")
            default:
                throw fail("unexpected character where a value was expected (only RFC 8259 JSON is accepted)")
            }
        }

        mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw fail("truncated literal") }
            let matches = literal.withUTF8Buffer { expected in
                (0..<count).allSatisfy { bytes[index + $0] == expected[$0] }
            }
            guard matches else { throw fail("invalid literal") }
            index += count
        }

        mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONObject {
            guard depth <= maximumDepth else { throw fail("nesting deeper than \(maximumDepth) levels") }
            index += 1  // {
            var members: [JSONObject.Member] = []
            var seen: Set<String> = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return JSONObject(members: members)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    throw fail("expected a string key")
                }
                let keyOffset = index
                let key = try parseString()
                // Small objects: a linear scan beats hashing; large ones switch to a set.
                let duplicate: Bool
                if members.count < 16 {
                    duplicate = members.contains { $0.key == key }
                } else {
                    if seen.isEmpty { seen = Set(members.map(\.key)) }
                    duplicate = !seen.insert(key).inserted
                }
                if duplicate { throw fail("duplicate key \(UntrustedText.quoted(key))", at: keyOffset) }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                index += 1
                skipWhitespace()
                let value = try parseValue(depth: depth)
                members.append(.init(key: key, value: value))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated object") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return JSONObject(members: members)
                }
                throw fail("expected ',' or '}'")
            }
        }

        mutating func parseArray(depth: Int) throws(JSONParseError) -> [JSONValue] {
            guard depth <= maximumDepth else { throw fail("nesting deeper than \(maximumDepth) levels") }
            index += 1  // [
            var elements: [JSONValue] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return elements
            }
            while true {
                skipWhitespace()
                elements.append(try parseValue(depth: depth))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated array") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                if bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return elements
                }
                throw fail("expected ',' or ']'")
            }
        }

        mutating func parseNumber() throws(JSONParseError) -> JSONNumber {
            let start = index
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("a number needs digits") }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
                if index < bytes.count, isDigit(bytes[index]) { throw fail("leading zeros are not allowed") }
            } else {
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard index < bytes.count, isDigit(bytes[index]) else { throw fail("a fraction needs digits") }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            var hasExponent = false
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                hasExponent = true
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                    index += 1
                }
                guard index < bytes.count, isDigit(bytes[index]) else { throw fail("an exponent needs digits") }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            let literal = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            // A number no Double can hold (1e400, four hundred digits) is refused, as Foundation's decoders refuse
            // it: we keep literals exact, but must not accept what Apple's own JSON decoding would not (found by
            // the fuzzer, Fuzz/Sources/FuzzStrictJSON). Short literals without an exponent cannot overflow.
            if hasExponent || index - start > 15, !(Double(literal)?.isFinite ?? false) {
                index = start
                throw fail("the number is out of range (beyond a 64-bit float)")
            }
            return JSONNumber(literal: literal)
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        mutating func parseString() throws(JSONParseError) -> String {
            index += 1  // opening quote
            let start = index
            // Fast path: no escapes. Skip 8 bytes at a time while none of them is a quote, a backslash or a
            // control character (App Store payloads are mostly long strings: nested JWSs), then finish byte by
            // byte to the closing quote, and validate the UTF-8 once.
            if let base = bytes.baseAddress {
                let raw = UnsafeRawPointer(base)
                while index + 8 <= bytes.count, !Self.mayContainSpecialByte(raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)) {
                    index += 8
                }
            }
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let raw = UnsafeBufferPointer(rebasing: bytes[start..<index])
                    guard let string = String(validating: raw, as: UTF8.self) else {
                        throw fail("string is not valid UTF-8", at: start)
                    }
                    index += 1
                    return string
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { throw fail("unescaped control character in string") }
                index += 1
            }
            guard index < bytes.count else { throw fail("unterminated string", at: start - 1) }
            // Slow path: decode escapes into a scratch buffer.
            var scratch = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let string = String(validating: scratch, as: UTF8.self) else {
                        throw fail("string is not valid UTF-8", at: start)
                    }
                    return string
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw fail("unterminated escape") }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""): scratch.append(UInt8(ascii: "\""))
                    case UInt8(ascii: "\\"): scratch.append(UInt8(ascii: "\\"))
                    case UInt8(ascii: "/"): scratch.append(UInt8(ascii: "/"))
                    case UInt8(ascii: "b"): scratch.append(0x08)
                    case UInt8(ascii: "f"): scratch.append(0x0C)
                    case UInt8(ascii: "n"): scratch.append(0x0A)
                    case UInt8(ascii: "r"): scratch.append(0x0D)
                    case UInt8(ascii: "t"): scratch.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try parseHex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                                throw fail("high surrogate escape without its low surrogate")
                            }
                            index += 2
                            let low = try parseHex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw fail("invalid low surrogate escape") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw fail("lone low surrogate escape")
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid unicode escape") }
                        scratch.append(contentsOf: Array(String(Character(unicode)).utf8))
                    default:
                        throw fail("invalid escape sequence")
                    }
                default:
                    if byte < 0x20 { throw fail("unescaped control character in string") }
                    scratch.append(byte)
                    index += 1
                }
            }
            throw fail("unterminated string", at: start - 1)
        }

        /// True if any byte of `word` is `"` (0x22), `\` (0x5C) or below 0x20 (exact, no false negatives).
        @inline(__always)
        static func mayContainSpecialByte(_ word: UInt64) -> Bool {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            func hasZeroByte(_ value: UInt64) -> UInt64 { (value &- ones) & ~value & highs }
            let below0x20 = (word &- ones &* 0x20) & ~word & highs
            return (below0x20 | hasZeroByte(word ^ (ones &* 0x22)) | hasZeroByte(word ^ (ones &* 0x5C))) != 0
        }

        mutating func parseHex4() throws(JSONParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw fail("truncated unicode escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw fail("invalid hex digit in unicode escape")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }
    }
}
