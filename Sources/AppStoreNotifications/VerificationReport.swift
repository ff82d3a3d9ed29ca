/// The one-line JSON verdict `pipelinectl verify` prints for each input, and the contract other checks use.
///
/// An input is a bare JWS, or an HTTP body `{"signedPayload": "..."}` (anything starting with `{`), whose
/// payload is always a notification. Valid:
/// `{"valid":true,"kind":…,"payload":{…},"transactionInfo":{…}|null,"renewalInfo":{…}|null,"appTransactionInfo":{…}|null}`;
/// invalid: `{"valid":false,"error":"<code>","reason":"<text>"}` (plus `"cause"`, the innermost code, when a
/// nested JWS failed). Decoded objects are the JSON as signed: every field, integers exact.
public struct VerificationReport: Sendable {
    public var isValid: Bool
    public var json: JSONObject

    /// The report as one line of compact JSON (no newline).
    public var line: String { json.serialized }

    public init(valid verified: VerifiedSignedData) {
        isValid = true
        var json = JSONObject(["valid": .bool(true), "kind": .string(verified.kind.rawValue)])
        switch verified {
        case .notification(let notification):
            json["payload"] = .object(notification.json)
            json["transactionInfo"] = notification.transactionInfo.map { .object($0.json) } ?? .null
            json["renewalInfo"] = notification.renewalInfo.map { .object($0.json) } ?? .null
            json["appTransactionInfo"] = notification.appTransactionInfo.map { .object($0.json) } ?? .null
        case .transaction(let payload):
            json["payload"] = .object(payload.json)
        case .renewalInfo(let payload):
            json["payload"] = .object(payload.json)
        case .appTransaction(let payload):
            json["payload"] = .object(payload.json)
        }
        for field in ["transactionInfo", "renewalInfo", "appTransactionInfo"] where json[field] == nil {
            json[field] = .null
        }
        self.json = json
    }

    public init(invalid code: String, reason: String, cause: String? = nil) {
        isValid = false
        json = JSONObject(["valid": .bool(false), "error": .string(code), "reason": .string(reason)])
        if let cause { json["cause"] = .string(cause) }
    }

    public init(invalid error: VerificationError) {
        let cause = error.rootCause
        self.init(invalid: error.code, reason: error.reason, cause: cause == error ? nil : cause.code)
    }

    /// Verifies one input line (without its newline) and reports the verdict.
    /// - Parameter kind: the kind to require; nil tells it from the payload (a body is always a notification).
    public static func verify(line: [UInt8], with verifier: SignedPayloadVerifier, kind: PayloadKind?) async -> VerificationReport {
        let jws: String
        var kind = kind
        if line.first == UInt8(ascii: "{") {
            do {
                let limit = verifier.configuration.maximumPayloadBytes + 64 * 1024
                jws = try ResponseBodyV2.parse(body: line, maximumBytes: limit).signedPayload
            } catch {
                return VerificationReport(invalid: error.code, reason: error.reason)
            }
            kind = kind ?? .notification
        } else {
            guard let text = String(validating: line, as: UTF8.self) else {
                return VerificationReport(invalid: .malformedJWS("the input is not UTF-8 text"))
            }
            jws = text
        }
        do {
            return VerificationReport(valid: try await verifier.verify(jws, as: kind))
        } catch {
            return VerificationReport(invalid: error)
        }
    }
}
