/// Why an HTTP body is not a V2 notification body. Each is the sender's fault (HTTP 400), never retried.
public enum RequestBodyError: Error, Sendable, Hashable, CustomStringConvertible {
    case bodyTooLarge(size: Int, limit: Int)
    case invalidJSON(String)
    case notAnObject(found: String)
    case missingSignedPayload
    case signedPayloadNotString(found: String)
    case signedPayloadNotCompactJWS(String)

    /// Stable identifier, returned to the sender as `{"error": code}`.
    public var code: String {
        switch self {
        case .bodyTooLarge: "bodyTooLarge"
        case .invalidJSON: "invalidJSON"
        case .notAnObject: "notAnObject"
        case .missingSignedPayload: "missingSignedPayload"
        case .signedPayloadNotString: "signedPayloadNotString"
        case .signedPayloadNotCompactJWS: "signedPayloadNotCompactJWS"
        }
    }

    public var reason: String {
        switch self {
        case .bodyTooLarge(let size, let limit): "the body is \(size) bytes, over the \(limit)-byte limit"
        case .invalidJSON(let detail): "the body is not strict UTF-8 JSON: \(detail)"
        case .notAnObject(let found): "the body is a JSON \(found), not an object {\"signedPayload\": \"<JWS>\"}"
        case .missingSignedPayload: "the body has no signedPayload (App Store Server Notifications V1 bodies are not accepted)"
        case .signedPayloadNotString(let found): "signedPayload is a JSON \(found), not a string"
        case .signedPayloadNotCompactJWS(let detail): "signedPayload is not a compact JWS: \(detail)"
        }
    }

    public var description: String { "\(code): \(reason)" }
}

extension ResponseBodyV2 {
    /// Parses the body Apple POSTs, strictly: a JSON object with `signedPayload` exactly once, as a string.
    /// Unknown extra fields are allowed (Apple may add some); duplicate keys are not (parsers disagree on them).
    public static func parse(body: [UInt8], maximumBytes: Int = 256 * 1024) throws(RequestBodyError) -> ResponseBodyV2 {
        guard body.count <= maximumBytes else { throw .bodyTooLarge(size: body.count, limit: maximumBytes) }
        let value: JSONValue
        do {
            value = try body.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in try StrictJSONParser(maximumDepth: 16).parse(buffer) }
        } catch {
            throw .invalidJSON(error.description)
        }
        guard case .object(let object) = value else { throw .notAnObject(found: value.typeName) }
        guard let signedPayload = object["signedPayload"] else { throw .missingSignedPayload }
        guard case .string(let string) = signedPayload else { throw .signedPayloadNotString(found: signedPayload.typeName) }
        return ResponseBodyV2(signedPayload: string)
    }

    /// The cheap shape check ingest makes without verifying anything: three non-empty segments of base64url
    /// characters. Whether they decode, and to what, is the worker's business.
    public static func checkCompactJWSShape(_ signedPayload: String) throws(RequestBodyError) {
        var text = signedPayload
        let problem: String? = text.withUTF8 { bytes in
            // The table is fetched once: reading a global per byte costs more than the check itself.
            base64URLCharacters.withUnsafeBufferPointer { isBase64URL in
            var segments = 1
            var segmentLength = 0
            for byte in bytes {
                if byte == UInt8(ascii: ".") {
                    guard segmentLength > 0 else { return "segment \(segments) is empty" }
                    segments += 1
                    segmentLength = 0
                } else if isBase64URL[Int(byte)] {
                    segmentLength += 1
                } else {
                    return "it contains a character outside the base64url alphabet"
                }
            }
            guard segmentLength > 0 else { return "segment \(segments) is empty" }
            guard segments == 3 else { return "it has \(segments) segments, not 3" }
            return nil
            }
        }
        if let problem { throw .signedPayloadNotCompactJWS(problem) }
    }

    /// `A-Z a-z 0-9 - _`, indexed by byte.
    private static let base64URLCharacters: [Bool] = (0..<256).map { byte in
        let character = UInt8(byte)
        return (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(character) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(character)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(character) || character == UInt8(ascii: "-") || character == UInt8(ascii: "_")
    }
}
