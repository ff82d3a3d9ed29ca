import Crypto

/// A signed payload taken apart for the archive, so that what repeats is stored once, and put back together byte
/// for byte.
///
/// Why: a real notification is ≈18.7 KB, of which ≈16 KB are three copies of one certificate chain (the outer JWS
/// header and the headers of the nested transaction and renewal JWSs, the latter base64-encoded once more inside the
/// payload). Compression cannot find those repeats (each copy sits at a different base64 alignment), so the
/// archive stored them every time. Taken apart, each header segment is stored once, by its SHA-256, and each
/// payload as the JSON text it encodes (a quarter smaller than its base64url, and queryable), nested JWSs in the
/// outer payload replaced by placeholders.
///
/// Exactness is by construction and checked: JWS segments are canonical base64url (the verifier refuses any other
/// spelling), so encoding the decoded bytes again gives the same segment; and `decompose` rebuilds the JWS from
/// its parts before it returns them, returning nil (the caller archives the raw text) when the result differs in
/// any byte, a payload is not UTF-8, or the payload already contains the placeholder's text. A nested JWS is taken
/// apart only when its signature is base64url and its payload holds no U+0001 (the separators of the archive's
/// nested columns); otherwise it stays in the outer payload as it is.
public struct ArchivedJWS: Sendable, Equatable {
    /// One JWS without its header: the SHA-256 of the header segment, the payload as its JSON text, the signature segment.
    public struct Part: Sendable, Equatable {
        public var headerDigest: [UInt8]
        public var payload: String
        public var signature: String

        public init(headerDigest: [UInt8], payload: String, signature: String) {
            self.headerDigest = headerDigest
            self.payload = payload
            self.signature = signature
        }
    }

    /// The outer JWS; in its payload, the i-th nested JWS string is the JSON string `"\u0001i"`.
    public var outer: Part
    /// The nested JWSs (signedTransactionInfo, signedRenewalInfo, …), in order of appearance.
    public var nested: [Part]
    /// Every header segment referenced, by digest (stored once per digest).
    public var headers: [[UInt8]: String]

    public init(outer: Part, nested: [Part], headers: [[UInt8]: String]) {
        self.outer = outer
        self.nested = nested
        self.headers = headers
    }

    /// The placeholder's opening text: a JSON escape of a control character, which Apple's payloads do not carry.
    static let placeholderPrefix = Array(#""\u0001"#.utf8)

    /// Takes `jws` apart, or nil when it is not a compact JWS whose parts rebuild it exactly.
    public static func decompose(_ jws: String) -> ArchivedJWS? {
        decompose(Array(jws.utf8))
    }

    /// Takes the JWS in `jws` (UTF-8 bytes, as read from a record) apart; byte-level throughout (the generic
    /// String and UTF8View algorithms cost a quarter of the worker's CPU in the benchmark).
    public static func decompose(_ jws: [UInt8]) -> ArchivedJWS? {
        var headers: [[UInt8]: String] = [:]
        guard let (outerHeader, outerPayload, outerSignature) = split(jws[...]), let payloadBytes = Base64.decode(outerPayload, alphabet: .url),
            !contains(payloadBytes, placeholderPrefix)
        else { return nil }
        var seen: [(ArraySlice<UInt8>, [UInt8])] = []
        let outerDigest = digest(outerHeader, into: &headers, seen: &seen)
        // Nested JWSs: JSON string literals of three base64url segments whose header is a JSON object ("eyJ").
        var template: [UInt8] = []
        template.reserveCapacity(payloadBytes.count / 4)
        var nested: [Part] = []
        var index = 0
        var copiedUpTo = 0
        while index < payloadBytes.count {
            guard payloadBytes[index] == UInt8(ascii: "\"") else {
                index += 1
                continue
            }
            // A string literal: find its end (escapes skipped).
            var end = index + 1
            var plain = true
            while end < payloadBytes.count, payloadBytes[end] != UInt8(ascii: "\"") {
                if payloadBytes[end] == UInt8(ascii: "\\") {
                    plain = false
                    end += 1
                }
                end += 1
            }
            guard end < payloadBytes.count else { return nil }
            let content = payloadBytes[(index + 1)..<end]
            if plain, content.count > 64, content[index + 1] == UInt8(ascii: "e"), content[index + 2] == UInt8(ascii: "y"),
                content[index + 3] == UInt8(ascii: "J"), let (header, payload, signature) = split(content),
                signature.allSatisfy({ Base64.isCharacter($0, of: .url) }), let bytes = Base64.decode(payload, alphabet: .url), !bytes.contains(0x01),
                let json = String(validating: bytes, as: UTF8.self)
            {
                template += payloadBytes[copiedUpTo..<index]
                template += placeholderPrefix + Array(String(nested.count).utf8) + [UInt8(ascii: "\"")]
                nested.append(Part(headerDigest: digest(header, into: &headers, seen: &seen), payload: json, signature: String(decoding: signature, as: UTF8.self)))
                copiedUpTo = end + 1
            }
            index = end + 1
        }
        template += payloadBytes[copiedUpTo...]
        guard let outerJSON = String(validating: template, as: UTF8.self) else { return nil }
        let archived = ArchivedJWS(
            outer: Part(headerDigest: outerDigest, payload: outerJSON, signature: String(decoding: outerSignature, as: UTF8.self)), nested: nested,
            headers: headers)
        guard let rebuilt = archived.signedPayloadBytes(header: { headers[$0] }), rebuilt == jws else { return nil }
        return archived
    }

    /// The JWS rebuilt from its parts, `header` giving each header segment by digest; nil if one is missing.
    public func signedPayload(header: ([UInt8]) -> String?) -> String? {
        signedPayloadBytes(header: header).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The outer payload's exact JSON text (nested JWSs back in place); nil if a header is missing.
    public func outerPayload(header: ([UInt8]) -> String?) -> String? {
        outerPayloadBytes(header: header).map { String(decoding: $0, as: UTF8.self) }
    }

    func signedPayloadBytes(header: ([UInt8]) -> String?) -> [UInt8]? {
        guard let outerHeader = header(outer.headerDigest), let payload = outerPayloadBytes(header: header) else { return nil }
        var jws = Array(outerHeader.utf8)
        jws.reserveCapacity(jws.count + payload.count * 4 / 3 + outer.signature.utf8.count + 4)
        jws.append(UInt8(ascii: "."))
        Base64.append(encoding: payload, alphabet: .url, to: &jws)
        jws.append(UInt8(ascii: "."))
        jws += outer.signature.utf8
        return jws
    }

    /// Byte by byte: each `"\u0001i"` of the outer payload becomes the i-th nested JWS, as a JSON string.
    func outerPayloadBytes(header: ([UInt8]) -> String?) -> [UInt8]? {
        let template = Array(outer.payload.utf8)
        guard !nested.isEmpty else { return template }
        var result: [UInt8] = []
        result.reserveCapacity(template.count + nested.count * 8_192)
        let prefix = Self.placeholderPrefix
        var index = 0
        while index < template.count {
            if template[index] == prefix[0], index + prefix.count < template.count,
                template[index..<(index + prefix.count)].elementsEqual(prefix)
            {
                var end = index + prefix.count
                var position = 0
                while end < template.count, template[end] >= UInt8(ascii: "0"), template[end] <= UInt8(ascii: "9") {
                    position = position * 10 + Int(template[end] - UInt8(ascii: "0"))
                    end += 1
                }
                if end < template.count, template[end] == UInt8(ascii: "\""), end > index + prefix.count, position < nested.count {
                    let part = nested[position]
                    guard let nestedHeader = header(part.headerDigest) else { return nil }
                    result.append(UInt8(ascii: "\""))
                    result += nestedHeader.utf8
                    result.append(UInt8(ascii: "."))
                    Base64.append(encoding: part.payload.utf8, alphabet: .url, to: &result)
                    result.append(UInt8(ascii: "."))
                    result += part.signature.utf8
                    result.append(UInt8(ascii: "\""))
                    index = end + 1
                    continue
                }
            }
            result.append(template[index])
            index += 1
        }
        return result
    }

    /// Header, payload and signature segments of a compact JWS: three non-empty segments.
    /// Only base64url characters in each segment (a JSON string literal's content may hold anything else).
    static func split(_ jws: ArraySlice<UInt8>) -> (ArraySlice<UInt8>, ArraySlice<UInt8>, ArraySlice<UInt8>)? {
        guard let first = jws.firstIndex(of: UInt8(ascii: ".")) else { return nil }
        let rest = jws[(first + 1)...]
        guard let second = rest.firstIndex(of: UInt8(ascii: ".")) else { return nil }
        let header = jws[..<first], payload = jws[(first + 1)..<second], signature = jws[(second + 1)...]
        guard !header.isEmpty, !payload.isEmpty, !signature.isEmpty, !signature.contains(UInt8(ascii: ".")) else { return nil }
        return (header, payload, signature)
    }

    /// The SHA-256 of `header`, hashed once per distinct segment of the JWS: Apple signs the outer and nested JWSs
    /// with one chain, so their header segments are usually the same bytes, and comparing ≈5 KB costs a tenth of
    /// hashing them.
    static func digest(_ header: ArraySlice<UInt8>, into headers: inout [[UInt8]: String], seen: inout [(ArraySlice<UInt8>, [UInt8])]) -> [UInt8] {
        for (segment, digest) in seen where segment.withUnsafeBufferPointer({ a in header.withUnsafeBufferPointer { b in sameBytes(a, b) } }) {
            return digest
        }
        let digest = Array(SHA256.hash(data: header))
        if headers[digest] == nil { headers[digest] = String(decoding: header, as: UTF8.self) }
        seen.append((header, digest))
        return digest
    }

    /// Whether `haystack` holds `needle` anywhere. Looks for `needle`'s second byte (the placeholder's backslash,
    /// rare in Apple's JSON) rather than its first (a quote, on every key and string).
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        guard needle.count >= 2 else { return needle.isEmpty || haystack.contains(needle[0]) }
        return haystack.withUnsafeBufferPointer { bytes in
            needle.withUnsafeBufferPointer { needle in
                var index = 1
                let last = bytes.count - needle.count + 1
                while index <= last {
                    if bytes[index] == needle[1], bytes[index - 1] == needle[0] {
                        var matched = true
                        for offset in 2..<needle.count where bytes[index - 1 + offset] != needle[offset] {
                            matched = false
                            break
                        }
                        if matched { return true }
                    }
                    index += 1
                }
                return false
            }
        }
    }
}
