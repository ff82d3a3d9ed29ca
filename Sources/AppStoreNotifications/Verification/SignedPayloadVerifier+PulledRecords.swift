import Crypto

/// What the pull side (pipelinectl reconcile and import) puts on the notifications topic beside Apple's
/// notifications, named by the record header `record-kind`. Ingest never sets that header, so nothing POSTed from
/// the internet is read as one of these; each is verified exactly like a notification's nested JWSs.
public enum PulledRecordKind: String, Sendable, CaseIterable {
    /// One subscription's entry of Get All Subscription Statuses: Apple's current status with its signed
    /// transaction and renewal info (a JSON document, `StatusSnapshotDocument`).
    case statusSnapshot = "status-snapshot"
    /// One signed transaction of Get Transaction History (the JWS itself).
    case historyTransaction = "history-transaction"
    /// A transaction the app's backend posted to the customer API (`PurchaseRecordDocument`): the JWS StoreKit
    /// handed the app, with the customer who claims it.
    case purchase = "purchase"
}

/// A status snapshot as produced to the topic: the statuses response's identity fields, the subscription group,
/// and one `lastTransactions` item, unchanged. Only the JWSs in it are signed; the identity is checked against the
/// configured apps and bound to the JWSs like a notification's.
public struct StatusSnapshotDocument: Sendable, Hashable, Decodable {
    /// The synthetic notificationType under which a snapshot is archived and shown as an entitlement's last event.
    public static let notificationType = "STATUS_SNAPSHOT"

    public var environment: String
    public var bundleId: String
    public var appAppleId: Int64?
    public var subscriptionGroupIdentifier: String?
    /// Apple's status: 1 active, 2 expired, 3 billing retry, 4 billing grace period, 5 revoked.
    public var status: Int32
    public var originalTransactionId: String
    public var signedTransactionInfo: String
    public var signedRenewalInfo: String?

    public init(
        environment: String, bundleId: String, appAppleId: Int64?, subscriptionGroupIdentifier: String?, status: Int32, originalTransactionId: String,
        signedTransactionInfo: String, signedRenewalInfo: String?
    ) {
        self.environment = environment
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.status = status
        self.originalTransactionId = originalTransactionId
        self.signedTransactionInfo = signedTransactionInfo
        self.signedRenewalInfo = signedRenewalInfo
    }

    /// The ledger key: the same snapshot (status and signed bytes) is applied once, however often it is produced.
    public var notificationUUID: String {
        "snapshot-" + ContentDigest.sha256Hex("\(status)|\(signedTransactionInfo)|\(signedRenewalInfo ?? "")").prefix(32)
    }

    public var json: JSONObject {
        var object = JSONObject([
            "recordKind": .string(PulledRecordKind.statusSnapshot.rawValue), "environment": .string(environment), "bundleId": .string(bundleId),
            "status": .number(JSONNumber(Int64(status))), "originalTransactionId": .string(originalTransactionId),
            "signedTransactionInfo": .string(signedTransactionInfo),
        ])
        if let appAppleId { object["appAppleId"] = .number(JSONNumber(appAppleId)) }
        if let subscriptionGroupIdentifier { object["subscriptionGroupIdentifier"] = .string(subscriptionGroupIdentifier) }
        if let signedRenewalInfo { object["signedRenewalInfo"] = .string(signedRenewalInfo) }
        return object
    }

    enum CodingKeys: String, CodingKey {
        case environment, bundleId, appAppleId, subscriptionGroupIdentifier, status, originalTransactionId, signedTransactionInfo, signedRenewalInfo
    }

    /// The record's JSON, through the strict decoder (`Decodable` below); a failure is `malformedPayload` naming the field.
    public init(record object: JSONObject) throws(VerificationError) {
        self = try VerificationError.decodeRecord(Self.self, from: object, named: "the status snapshot")
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        environment = try container.decode(String.self, forKey: .environment)
        bundleId = try container.decode(String.self, forKey: .bundleId)
        appAppleId = try container.decodeIfPresent(Int64.self, forKey: .appAppleId)
        subscriptionGroupIdentifier = try container.decodeIfPresent(String.self, forKey: .subscriptionGroupIdentifier)
        status = try container.decode(Int32.self, forKey: .status)
        originalTransactionId = try container.decode(String.self, forKey: .originalTransactionId)
        signedTransactionInfo = try container.decode(String.self, forKey: .signedTransactionInfo)
        signedRenewalInfo = try container.decodeIfPresent(String.self, forKey: .signedRenewalInfo)
    }
}

extension SignedPayloadVerifier {
    /// Verifies a status snapshot record: the identity against the configured apps (as a notification's), each JWS
    /// (chain, signature, bound to that identity), that they are about the snapshot's subscription, and that
    /// Apple's status agrees with the signed revocation. Returns it as a notification of type `STATUS_SNAPSHOT`
    /// signed at the later of its JWSs' signedDates, so the one state machine, order and store apply to it.
    /// A status this version does not know is refused (dead-lettered, so an upgrade can re-drive it): the state
    /// machine cannot tell what access it grants.
    public func verifyStatusSnapshot(_ value: [UInt8]) async throws(VerificationError) -> VerifiedNotification {
        let object = try recordObject(value, "the status snapshot")
        let document = try StatusSnapshotDocument(record: object)
        guard let status = SubscriptionStatus(rawValue: document.status) else {
            throw .malformedPayload("the status snapshot's status \(document.status) is not one this version knows (1…5); kept for a re-drive after an upgrade")
        }
        let (bundleId, environment) = try checkIdentity(
            bundleId: document.bundleId, appAppleId: document.appAppleId, checksAppAppleId: true, environment: document.environment, of: "the status snapshot")
        let binding = Binding(bundleId: bundleId, environment: environment, appAppleId: document.appAppleId)
        let transaction = try await nestedTransaction(document.signedTransactionInfo, boundTo: binding)
        let renewal = try await nestedRenewalInfo(document.signedRenewalInfo, boundTo: binding)
        guard transaction.model.originalTransactionId == document.originalTransactionId,
            renewal.map({ $0.model.originalTransactionId == document.originalTransactionId }) ?? true
        else {
            throw .malformedPayload("the status snapshot's JWSs are not all about originalTransactionId \(UntrustedText.quoted(document.originalTransactionId))")
        }
        // The status is not signed: it must at least agree with what is (a revocation is signed in the transaction).
        if (status == .revoked) != (transaction.model.revocationDate != nil) {
            throw .malformedPayload("the status snapshot says status \(document.status) but the signed transaction \(transaction.model.revocationDate == nil ? "has no" : "has a") revocationDate")
        }
        let signedDate = max(transaction.signedDate, renewal?.signedDate ?? transaction.signedDate)
        let uuid = document.notificationUUID
        var data = JSONObject([
            "environment": .string(environment.rawValue), "bundleId": .string(bundleId), "status": .number(JSONNumber(Int64(document.status))),
            "signedTransactionInfo": .string(document.signedTransactionInfo),
        ])
        if let appAppleId = document.appAppleId { data["appAppleId"] = .number(JSONNumber(appAppleId)) }
        if let signed = document.signedRenewalInfo { data["signedRenewalInfo"] = .string(signed) }
        let json = JSONObject([
            "notificationType": .string(StatusSnapshotDocument.notificationType), "notificationUUID": .string(uuid), "data": .object(data),
            "version": .string("2.0"), "signedDate": .number(JSONNumber(signedDate.millisecondsSince1970)),
        ])
        let payload = try decode(ResponseBodyV2DecodedPayload.self, json, what: "the status snapshot")
        return VerifiedNotification(
            payload: payload, json: json, signedDate: signedDate, bundleId: bundleId, environment: environment, transactionInfo: transaction,
            renewalInfo: renewal, appTransactionInfo: nil)
    }

    /// The synthetic notificationType of a transaction imported from Get Transaction History.
    public static let historyTransactionType = "TRANSACTION_HISTORY"

    /// Verifies a transaction from Get Transaction History (its bundle id and environment against the configured
    /// apps) and returns it as a notification of type `TRANSACTION_HISTORY`: stored in `transactions`, archived,
    /// deduplicated by its bytes; it changes no entitlement by itself (the import's status snapshot does).
    public func verifyHistoryTransaction(_ value: [UInt8]) async throws(VerificationError) -> VerifiedNotification {
        guard let text = String(validating: value, as: UTF8.self) else { throw .malformedJWS("the record is not UTF-8 text") }
        let jws = try await verifyJWS(text, expected: .transaction)
        let transaction = try finishTransaction(jws, boundTo: nil)
        guard let bundleId = transaction.model.bundleId, let environment = transaction.model.rawEnvironment.flatMap(Environment.init(rawValue:)) else {
            throw .malformedPayload("the transaction names no bundleId or environment")
        }
        let uuid = "transaction-" + (transaction.model.transactionId ?? "") + "-" + ContentDigest.sha256Hex(text).prefix(16)
        let json = JSONObject([
            "notificationType": .string(Self.historyTransactionType), "notificationUUID": .string(uuid),
            "data": .object(JSONObject(["environment": .string(environment.rawValue), "bundleId": .string(bundleId), "signedTransactionInfo": .string(text)])),
            "version": .string("2.0"), "signedDate": .number(JSONNumber(transaction.signedDate.millisecondsSince1970)),
        ])
        let payload = try decode(ResponseBodyV2DecodedPayload.self, json, what: "the history transaction")
        return VerifiedNotification(
            payload: payload, json: json, signedDate: transaction.signedDate, bundleId: bundleId, environment: environment, transactionInfo: transaction,
            renewalInfo: nil, appTransactionInfo: nil)
    }
}

/// A stable digest of text (not `hashValue`, which differs per process): the ledger keys of pulled records and
/// purchases, checkpoint keys of id lists. Keys made from it are stored: what it digests never changes.
public enum ContentDigest {
    public static func sha256Hex(_ text: String) -> String {
        Hex.encode(Array(SHA256.hash(data: Array(text.utf8))))
    }
}

extension VerificationError {
    /// Decodes one of our own record documents (a status snapshot, a purchase) with the strict decoder every model
    /// goes through; a failure is `malformedPayload` naming the field (`the purchase's customerId is missing`).
    static func decodeRecord<T: Decodable>(_ type: T.Type, from object: JSONObject, named name: String) throws(VerificationError) -> T {
        do {
            return try JSONValueDecoder().decode(type, from: .object(object))
        } catch let error as VerificationError {
            throw error
        } catch let error as DecodingError {
            let field: String
            let reason: String
            switch error {
            case .keyNotFound(let key, _): (field, reason) = (key.stringValue, "is missing")
            case .valueNotFound(_, let context): (field, reason) = (context.codingPath.last?.stringValue ?? "?", "is null")
            case .typeMismatch(_, let context), .dataCorrupted(let context):
                (field, reason) = (context.codingPath.last?.stringValue ?? "?", "is not valid: \(context.debugDescription)")
            @unknown default: (field, reason) = ("?", "\(error)")
            }
            throw .malformedPayload("\(name)'s \(field) \(reason)")
        } catch {
            throw .malformedPayload("\(name) is not valid: \(error)")
        }
    }
}
