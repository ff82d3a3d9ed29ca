import Foundation

/// What a record about to be produced or recorded says it is about, for the erasure screen: its app, the
/// identifiers it names and when what it says happened, read *without verification*. A forged record claiming an
/// erased customer is held back with the genuine ones, which is what we want; a claim never lets anything in.
///
/// The times follow `VerifiedNotification.erasureTime`, so a record the pull side or a re-drive holds back is exactly
/// one the worker would suppress: a notification's `signedDate`; a status snapshot's or a history transaction's
/// later of purchase and revocation date; a purchase's `received-at`. A record with identifiers but no readable time
/// is held back by any erasure of them.
public struct ErasureClaim: Sendable, Hashable {
    public var bundleId: String
    public var identifiers: [ErasedIdentifier]
    public var time: Date?

    public init(bundleId: String, identifiers: [ErasedIdentifier], time: Date?) {
        self.bundleId = bundleId
        self.identifiers = identifiers
        self.time = time
    }

    /// The claim of a notifications-topic record: `kind` nil for Apple's notifications (ingest's and a backfill's),
    /// else our own record kind. `receivedAt`: the record's `received-at`, for purchases. Nil when it names no app.
    public static func of(record value: [UInt8], kind: PulledRecordKind?, receivedAt: Date? = nil) -> ErasureClaim? {
        switch kind {
        case nil:
            guard let text = String(validating: value, as: UTF8.self) else { return nil }
            return ofNotification(text)
        case .historyTransaction?:
            guard let text = String(validating: value, as: UTF8.self), let transaction = UnverifiedPeek.payload(of: text) else { return nil }
            return ofTransaction(transaction, renewal: nil, bundleId: transaction["bundleId"]?.stringValue)
        case .statusSnapshot?:
            guard let document = try? StrictJSONParser(maximumDepth: 8).parseObject(value) else { return nil }
            let transaction = document["signedTransactionInfo"]?.stringValue.flatMap(UnverifiedPeek.payload(of:))
            let renewal = document["signedRenewalInfo"]?.stringValue.flatMap(UnverifiedPeek.payload(of:))
            var claim = ofTransaction(transaction ?? JSONObject(), renewal: renewal, bundleId: document["bundleId"]?.stringValue)
            if let otid = document["originalTransactionId"]?.stringValue, let bundleId = claim?.bundleId {
                claim?.identifiers.append(ErasedIdentifier(.originalTransactionId, bundleId: bundleId, value: otid))
            }
            return claim
        case .purchase?:
            guard let document = try? StrictJSONParser(maximumDepth: 8).parseObject(value), let bundleId = document["bundleId"]?.stringValue else { return nil }
            let transaction = document["signedTransaction"]?.stringValue.flatMap(UnverifiedPeek.payload(of:)) ?? JSONObject()
            var claim = ofTransaction(transaction, renewal: nil, bundleId: bundleId)
            if let customerId = document["customerId"]?.stringValue { claim?.identifiers.append(ErasedIdentifier(.customerId, bundleId: bundleId, value: customerId)) }
            claim?.time = receivedAt
            return claim
        }
    }

    /// An Apple notification: its nested transaction, renewal info and app transaction; signed at `signedDate`.
    public static func ofNotification(_ signedPayload: String) -> ErasureClaim? {
        guard let payload = UnverifiedPeek.payload(of: signedPayload) else { return nil }
        let data = payload["data"]?.objectValue
        let appData = payload["appData"]?.objectValue
        guard let bundleId = data?["bundleId"]?.stringValue ?? appData?["bundleId"]?.stringValue ?? payload["summary"]?.objectValue?["bundleId"]?.stringValue
        else { return nil }
        let transaction = data?["signedTransactionInfo"]?.stringValue.flatMap(UnverifiedPeek.payload(of:))
        let renewal = data?["signedRenewalInfo"]?.stringValue.flatMap(UnverifiedPeek.payload(of:))
        var claim = ofTransaction(transaction ?? JSONObject(), renewal: renewal, bundleId: bundleId)
        if let app = appData?["signedAppTransactionInfo"]?.stringValue.flatMap(UnverifiedPeek.payload(of:)),
            let appTransactionId = app["appTransactionId"]?.stringValue
        {
            claim?.identifiers.append(ErasedIdentifier(.appTransactionId, bundleId: bundleId, value: appTransactionId))
        }
        claim?.time = payload["signedDate"]?.int64Value.map { Date(timeIntervalSince1970: Double($0) / 1000) }
        return claim
    }

    /// A transaction (and renewal info): the subscription, the transaction, the token, the app transaction; the
    /// later of purchase and revocation date.
    static func ofTransaction(_ transaction: JSONObject, renewal: JSONObject?, bundleId: String?) -> ErasureClaim? {
        guard let bundleId = bundleId ?? transaction["bundleId"]?.stringValue else { return nil }
        var identifiers: [ErasedIdentifier] = []
        func add(_ kind: ErasedIdentifierKind, _ value: JSONValue?) {
            guard let text = value?.stringValue, !text.isEmpty else { return }
            let identifier = ErasedIdentifier(kind, bundleId: bundleId, value: text)
            if !identifiers.contains(identifier) { identifiers.append(identifier) }
        }
        for object in [transaction, renewal ?? JSONObject()] {
            add(.originalTransactionId, object["originalTransactionId"])
            add(.appAccountToken, object["appAccountToken"])
            add(.appTransactionId, object["appTransactionId"])
        }
        add(.transactionId, transaction["transactionId"])
        let dates = [transaction["purchaseDate"], transaction["revocationDate"]].compactMap { $0?.int64Value }
        return ErasureClaim(bundleId: bundleId, identifiers: identifiers, time: dates.max().map { Date(timeIntervalSince1970: Double($0) / 1000) })
    }
}
