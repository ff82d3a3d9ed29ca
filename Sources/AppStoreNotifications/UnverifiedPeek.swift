/// Reads fields of a signed payload *without verifying it*, for routing decisions only.
///
/// Ingest keys each Kafka record by the subscription it is about, so all events of one subscription land on one
/// partition and are processed in order. That needs the key before the worker verifies anything; a forged key
/// can only misplace a record that verification will reject anyway. Never use these values for trust.
public enum UnverifiedPeek {
    /// The routing key of a notification (`RoutingKey`'s rule) read without verifying: the nested
    /// `signedTransactionInfo`'s `originalTransactionId`, else what the notification is about, else its
    /// `notificationUUID`, else nil.
    public static func partitionKey(ofNotification signedPayload: String) -> String? {
        guard let payload = payload(of: signedPayload) else { return nil }
        func nested(_ jws: JSONValue?, _ field: String) -> String? {
            jws?.stringValue.flatMap { self.payload(of: $0) }?[field]?.stringValue
        }
        return RoutingKey.first(
            originalTransactionId: { nested(payload["data"]?.objectValue?["signedTransactionInfo"], "originalTransactionId") },
            appTransactionId: { nested(payload["appData"]?.objectValue?["signedAppTransactionInfo"], "appTransactionId") },
            requestIdentifier: { payload["summary"]?.objectValue?["requestIdentifier"]?.stringValue },
            externalPurchaseId: { payload["externalPurchaseToken"]?.objectValue?["externalPurchaseId"]?.stringValue },
            notificationUUID: { payload["notificationUUID"]?.stringValue })
    }

    /// The decoded JSON payload of a compact JWS, or nil if it does not decode to a strict JSON object.
    public static func payload(of jws: String) -> JSONObject? {
        var jws = jws
        let bytes: [UInt8]? = jws.withUTF8 { buffer in
            guard let first = buffer.firstIndex(of: UInt8(ascii: ".")),
                let second = buffer[(first + 1)...].firstIndex(of: UInt8(ascii: "."))
            else { return nil }
            return Base64.decode(UnsafeBufferPointer(rebasing: buffer[(first + 1)..<second]), alphabet: .url)
        }
        guard let bytes else { return nil }
        return try? StrictJSONParser(maximumDepth: 16).parseObject(bytes)
    }

    /// What a notification says it is about, for finding a dead letter (never for trust): each field only when it
    /// is a plausible identifier.
    public static func claims(ofNotification signedPayload: String) -> UnverifiedClaims {
        var claims = UnverifiedClaims()
        guard let payload = payload(of: signedPayload) else { return claims }
        func plausible(_ value: JSONValue?) -> String? { value?.stringValue.flatMap { RoutingKey.isPlausible($0) ? $0 : nil } }
        claims.notificationUUID = plausible(payload["notificationUUID"])
        claims.notificationType = plausible(payload["notificationType"])
        let data = payload["data"]?.objectValue
        claims.bundleId = plausible(data?["bundleId"])
        if let nested = data?["signedTransactionInfo"]?.stringValue, let transaction = self.payload(of: nested) {
            claims.originalTransactionId = plausible(transaction["originalTransactionId"])
        }
        return claims
    }
}

/// The identifiers an unverified notification claims (`UnverifiedPeek.claims`).
public struct UnverifiedClaims: Sendable, Hashable {
    public var notificationUUID: String?
    public var notificationType: String?
    public var bundleId: String?
    public var originalTransactionId: String?

    public init() {}
}
