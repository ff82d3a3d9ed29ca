/// Strict base64 and base64url (RFC 4648) encoding and decoding.
///
/// Why our own: JWS compact serialization (RFC 7515) requires base64url *without* padding, and `x5c` entries
/// require standard base64 *with* padding. Lenient decoders (Foundation's, most JWT libraries') accept padding
/// where none is allowed, the other alphabet, stray characters, or non-canonical trailing bits. Every one of
/// those is a second spelling of the same signed bytes, and a second spelling is a place where two parsers can
/// disagree about what was signed. We accept exactly one spelling.
public enum Base64 {
    /// The two alphabets of RFC 4648.
    public enum Alphabet: Sendable {
        /// `A-Z a-z 0-9 + /` with `=` padding to a multiple of 4 (RFC 4648 §4). Used by `x5c`.
        case standard
        /// `A-Z a-z 0-9 - _` without padding (RFC 4648 §5, RFC 7515 §2). Used by JWS segments.
        case url
    }

    private static let invalid: UInt8 = 0xFF

    private static let standardTable: [UInt8] = makeTable(plus: UInt8(ascii: "+"), slash: UInt8(ascii: "/"))
    private static let urlTable: [UInt8] = makeTable(plus: UInt8(ascii: "-"), slash: UInt8(ascii: "_"))

    private static func makeTable(plus: UInt8, slash: UInt8) -> [UInt8] {
        var table = [UInt8](repeating: invalid, count: 256)
        for (index, character) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8.enumerated() {
            table[Int(character)] = UInt8(index)
        }
        table[Int(plus)] = 62
        table[Int(slash)] = 63
        return table
    }

    /// Whether `byte` is one of `alphabet`'s 64 characters (padding is not).
    static func isCharacter(_ byte: UInt8, of alphabet: Alphabet) -> Bool {
        (alphabet == .url ? urlTable : standardTable)[Int(byte)] != invalid
    }

    /// Decodes `input`, or returns nil if it is not the one canonical encoding of some byte string in `alphabet`.
    public static func decode(_ input: some StringProtocol, alphabet: Alphabet) -> [UInt8]? {
        var input = String(input)
        return input.withUTF8 { decode($0, alphabet: alphabet) }
    }

    /// Decodes `input`, or returns nil if it is not the one canonical encoding of some byte string in `alphabet`.
    public static func decode(_ input: ArraySlice<UInt8>, alphabet: Alphabet) -> [UInt8]? {
        input.withUnsafeBufferPointer { decode($0, alphabet: alphabet) }
    }

    /// Decodes `input`, or returns nil if it is not the one canonical encoding of some byte string in `alphabet`.
    public static func decode(_ input: UnsafeBufferPointer<UInt8>, alphabet: Alphabet) -> [UInt8]? {
        var length = input.count
        switch alphabet {
        case .url:
            // No padding at all; a lone trailing sextet (length % 4 == 1) encodes no whole byte.
            if length % 4 == 1 { return nil }
        case .standard:
            guard length % 4 == 0 else { return nil }
            if length >= 1, input[length - 1] == UInt8(ascii: "=") { length -= 1 }
            if length >= 1, input[length - 1] == UInt8(ascii: "=") { length -= 1 }
        }
        let table = alphabet == .url ? urlTable : standardTable
        let fullQuads = length / 4
        let remainder = length % 4
        let outputCount = fullQuads * 3 + (remainder == 0 ? 0 : remainder - 1)
        var failed = false
        let output = [UInt8](unsafeUninitializedCapacity: outputCount) { buffer, initialized in
            table.withUnsafeBufferPointer { table in
                var inIndex = 0
                var outIndex = 0
                var bad: UInt8 = 0
                for _ in 0..<fullQuads {
                    let a = table[Int(input[inIndex])]
                    let b = table[Int(input[inIndex + 1])]
                    let c = table[Int(input[inIndex + 2])]
                    let d = table[Int(input[inIndex + 3])]
                    bad |= a | b | c | d
                    let word = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    buffer[outIndex] = UInt8(truncatingIfNeeded: word >> 16)
                    buffer[outIndex + 1] = UInt8(truncatingIfNeeded: word >> 8)
                    buffer[outIndex + 2] = UInt8(truncatingIfNeeded: word)
                    inIndex += 4
                    outIndex += 3
                }
                // Any invalid character has the high bit set in the table, so one check covers the loop.
                if bad & 0x80 != 0 { failed = true }
                switch remainder {
                case 2:
                    let a = table[Int(input[inIndex])]
                    let b = table[Int(input[inIndex + 1])]
                    // The low 4 bits of the second sextet are unused: canonical encodings leave them zero.
                    if (a | b) & 0x80 != 0 || b & 0x0F != 0 { failed = true; break }
                    buffer[outIndex] = a << 2 | b >> 4
                    outIndex += 1
                case 3:
                    let a = table[Int(input[inIndex])]
                    let b = table[Int(input[inIndex + 1])]
                    let c = table[Int(input[inIndex + 2])]
                    // The low 2 bits of the third sextet are unused.
                    if (a | b | c) & 0x80 != 0 || c & 0x03 != 0 { failed = true; break }
                    buffer[outIndex] = a << 2 | b >> 4
                    buffer[outIndex + 1] = (b & 0x0F) << 4 | c >> 2
                    outIndex += 2
                default:
                    break
                }
                initialized = failed ? 0 : outIndex
            }
        }
        return failed ? nil : output
    }

    private static let standardCharacters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let urlCharacters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The length of the canonical encoding of `count` bytes.
    static func encodedCount(_ count: Int, alphabet: Alphabet) -> Int {
        alphabet == .standard ? (count + 2) / 3 * 4 : count / 3 * 4 + (count % 3 == 0 ? 0 : count % 3 + 1)
    }

    /// Encodes `bytes` in the canonical form of `alphabet` (padding only for `.standard`).
    public static func encode(_ bytes: some Sequence<UInt8>, alphabet: Alphabet) -> String {
        if let encoded = bytes.withContiguousStorageIfAvailable({ input in
            String(unsafeUninitializedCapacity: encodedCount(input.count, alphabet: alphabet)) { output in
                encode(input, alphabet: alphabet, into: output)
            }
        }) {
            return encoded
        }
        return encode(Array(bytes), alphabet: alphabet)
    }

    /// Appends the canonical encoding of `bytes` to `output` (the archive rebuilds a JWS this way, a segment at a time).
    static func append(encoding bytes: some Collection<UInt8>, alphabet: Alphabet, to output: inout [UInt8]) {
        let appended: Void? = bytes.withContiguousStorageIfAvailable { input in
            let count = encodedCount(input.count, alphabet: alphabet)
            output.reserveCapacity(output.count + count)
            let start = output.count
            output.append(contentsOf: repeatElement(0, count: count))
            output.withUnsafeMutableBufferPointer { whole in
                _ = encode(input, alphabet: alphabet, into: UnsafeMutableBufferPointer(rebasing: whole[start...]))
            }
        }
        if appended == nil { append(encoding: Array(bytes), alphabet: alphabet, to: &output) }
    }

    /// Writes the encoding of `input` to the start of `output` (at least `encodedCount` long); returns its length.
    /// Table look-ups on raw buffers: the generic version cost the worker 3 % of its CPU rebuilding archived JWSs.
    private static func encode(_ input: UnsafeBufferPointer<UInt8>, alphabet: Alphabet, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let table = alphabet == .url ? urlCharacters : standardCharacters
        return table.withUnsafeBufferPointer { characters in
            var inIndex = 0
            var outIndex = 0
            let count = input.count
            while inIndex + 3 <= count {
                let word = UInt32(input[inIndex]) << 16 | UInt32(input[inIndex + 1]) << 8 | UInt32(input[inIndex + 2])
                output[outIndex] = characters[Int(word >> 18 & 0x3F)]
                output[outIndex + 1] = characters[Int(word >> 12 & 0x3F)]
                output[outIndex + 2] = characters[Int(word >> 6 & 0x3F)]
                output[outIndex + 3] = characters[Int(word & 0x3F)]
                inIndex += 3
                outIndex += 4
            }
            let rest = count - inIndex
            if rest > 0 {
                let word = UInt32(input[inIndex]) << 16 | (rest == 2 ? UInt32(input[inIndex + 1]) << 8 : 0)
                output[outIndex] = characters[Int(word >> 18 & 0x3F)]
                output[outIndex + 1] = characters[Int(word >> 12 & 0x3F)]
                outIndex += 2
                if rest == 2 {
                    output[outIndex] = characters[Int(word >> 6 & 0x3F)]
                    outIndex += 1
                }
                if alphabet == .standard {
                    for _ in 0..<(3 - rest) {
                        output[outIndex] = UInt8(ascii: "=")
                        outIndex += 1
                    }
                }
            }
            return outIndex
        }
    }
}

/// Lower-case hexadecimal, for fingerprints and log lines.
public enum Hex {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var output: [UInt8] = []
        for byte in bytes {
            output.append(digits[Int(byte >> 4)])
            output.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: output, as: UTF8.self)
    }
}
