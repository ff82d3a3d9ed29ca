import Crypto

/// Who claims a purchase posted through the customer API, and under which ownership policy: carried by the
/// `purchase` record so the worker decides ownership in the batch transaction, in the subscription's order.
public struct PurchaseClaim: Sendable, Hashable {
    /// The customer (a UUID in lower case, the app's user id as an appAccountToken).
    public var customerId: String
    public var policy: OwnershipPolicy

    public init(customerId: String, policy: OwnershipPolicy) {
        self.customerId = customerId
        self.policy = policy
    }
}

/// A purchase as the customer API produces it to the notifications topic (record kind `purchase`): the JWS
/// StoreKit gave the app (`jwsRepresentation`), optionally the renewal info, the customer and the policy.
/// Only the JWSs are signed: the worker verifies them again, exactly as the API did.
public struct PurchaseRecordDocument: Sendable, Hashable, Decodable {
    /// The synthetic notificationType under which a purchase is archived and shown as an entitlement's last event.
    public static let notificationType = EntitlementEventCause.purchaseType

    /// The bundle id the backend posted it under (the route's): the transaction must be for it.
    public var bundleId: String
    public var claim: PurchaseClaim
    public var signedTransaction: String
    public var signedRenewalInfo: String?

    public init(bundleId: String, claim: PurchaseClaim, signedTransaction: String, signedRenewalInfo: String?) {
        self.bundleId = bundleId
        self.claim = claim
        self.signedTransaction = signedTransaction
        self.signedRenewalInfo = signedRenewalInfo
    }

    /// The ledger key: the same claim of the same signed bytes is applied once, however often it is posted, so a
    /// repeated POST gets the first one's answer.
    public var purchaseKey: String {
        // Each part ends with a NUL, so no two claims' parts run together into the same bytes.
        let parts = [bundleId, claim.customerId, claim.policy.rawValue, signedTransaction, signedRenewalInfo ?? ""]
        return "purchase-" + ContentDigest.sha256Hex(parts.map { $0 + "\u{0}" }.joined()).prefix(32)
    }

    public var json: JSONObject {
        var object = JSONObject([
            "recordKind": .string(PulledRecordKind.purchase.rawValue), "bundleId": .string(bundleId), "customerId": .string(claim.customerId),
            "ownershipPolicy": .string(claim.policy.rawValue), "signedTransaction": .string(signedTransaction),
        ])
        if let signedRenewalInfo { object["signedRenewalInfo"] = .string(signedRenewalInfo) }
        return object
    }

    enum CodingKeys: String, CodingKey { case bundleId, customerId, ownershipPolicy, signedTransaction, signedRenewalInfo }

    /// The record's JSON, through the strict decoder (`Decodable` below); a failure is `malformedPayload` naming the field.
    public init(record object: JSONObject) throws(VerificationError) {
        self = try VerificationError.decodeRecord(Self.self, from: object, named: "the purchase")
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        bundleId = try container.decode(String.self, forKey: .bundleId)
        guard let customer = CustomerId.canonical(try container.decode(String.self, forKey: .customerId)) else {
            throw VerificationError.malformedPayload("the purchase's customerId is not a UUID")
        }
        let rawPolicy = try container.decode(String.self, forKey: .ownershipPolicy)
        guard let policy = OwnershipPolicy(rawValue: rawPolicy) else {
            throw VerificationError.malformedPayload("the purchase's ownershipPolicy \(UntrustedText.quoted(rawPolicy, limit: 40)) is not one this version knows")
        }
        claim = PurchaseClaim(customerId: customer, policy: policy)
        signedTransaction = try container.decode(String.self, forKey: .signedTransaction)
        signedRenewalInfo = try container.decodeIfPresent(String.self, forKey: .signedRenewalInfo)
    }
}

extension SignedPayloadVerifier {
    /// Verifies a posted purchase exactly as a notification's nested transaction: chain, signature, the bundle id
    /// (which must be the route's) and environment against the configured apps (Xcode and LocalTesting refused
    /// unless local development is enabled); the renewal info bound to the same environment and subscription.
    /// Returns it as a notification of type `PURCHASE` signed at the later of its JWSs' signedDates, so the one
    /// state machine, order guard and store apply it, and a later SUBSCRIBED for the same transaction is a
    /// forward-only no-op.
    public func verifyPurchase(_ document: PurchaseRecordDocument) async throws(VerificationError) -> VerifiedNotification {
        let transaction: VerifiedPayload<JWSTransactionDecodedPayload>
        transaction = try finishTransaction(try await verifyJWS(document.signedTransaction, expected: .transaction), boundTo: nil)
        guard transaction.model.bundleId == document.bundleId else {
            throw .bundleIdMismatch(
                "the transaction is for bundle \(UntrustedText.quoted(transaction.model.bundleId ?? "none")), not \(UntrustedText.quoted(document.bundleId))")
        }
        guard let bundleId = transaction.model.bundleId, let environment = transaction.model.rawEnvironment.flatMap(Environment.init(rawValue:)) else {
            throw .malformedPayload("the transaction names no bundleId or environment")
        }
        guard transaction.model.originalTransactionId != nil, transaction.model.transactionId != nil else {
            throw .malformedPayload("the transaction has no transactionId or originalTransactionId")
        }
        let binding = Binding(bundleId: bundleId, environment: environment, appAppleId: nil)
        let renewal = try await nestedRenewalInfo(document.signedRenewalInfo, boundTo: binding)
        if let renewal, renewal.model.originalTransactionId != transaction.model.originalTransactionId {
            throw .malformedPayload("the renewal info is not about the transaction's subscription")
        }
        let signedDate = max(transaction.signedDate, renewal?.signedDate ?? transaction.signedDate)
        var data = JSONObject([
            "environment": .string(environment.rawValue), "bundleId": .string(bundleId), "signedTransactionInfo": .string(document.signedTransaction),
        ])
        if let signed = document.signedRenewalInfo { data["signedRenewalInfo"] = .string(signed) }
        let json = JSONObject([
            "notificationType": .string(PurchaseRecordDocument.notificationType), "notificationUUID": .string(document.purchaseKey), "data": .object(data),
            "version": .string("2.0"), "signedDate": .number(JSONNumber(signedDate.millisecondsSince1970)),
        ])
        let payload = try decode(ResponseBodyV2DecodedPayload.self, json, what: "the purchase")
        var verified = VerifiedNotification(
            payload: payload, json: json, signedDate: signedDate, bundleId: bundleId, environment: environment, transactionInfo: transaction,
            renewalInfo: renewal, appTransactionInfo: nil)
        verified.purchase = document.claim
        return verified
    }

    /// Verifies a `purchase` record as the worker reads it from the topic.
    public func verifyPurchaseRecord(_ value: [UInt8]) async throws(VerificationError) -> VerifiedNotification {
        let object = try recordObject(value, "the purchase record")
        return try await verifyPurchase(try PurchaseRecordDocument(record: object))
    }
}
