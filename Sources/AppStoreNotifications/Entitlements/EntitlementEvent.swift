import Crypto

/// What an app backend is told about a subscription, before and after a change: the fields of `entitlements`
/// that decide access, in Apple's camelCase. `isActive` is computed at the cause's signedDate, exactly (no
/// leeway: the leeway is for clocks that read the row later), so the same cause always yields the same value.
public struct EntitlementSnapshot: Sendable, Hashable {
    public var status: String
    public var isActive: Bool
    public var expiresDate: Timestamp?
    public var productId: String?
    public var autoRenewStatus: Int32?
    public var autoRenewProductId: String?
    public var gracePeriodExpiresDate: Timestamp?
    public var revocationDate: Timestamp?
    public var revocationReason: Int32?
    public var revocationType: String?
    public var supersededBy: String?

    public init(_ state: EntitlementState, at time: Timestamp) {
        status = state.status.rawValue
        isActive = state.isActive(at: time, leewayMilliseconds: 0)
        expiresDate = state.expiresAt
        productId = state.productId
        autoRenewStatus = state.autoRenewStatus
        autoRenewProductId = state.autoRenewProductId
        gracePeriodExpiresDate = state.gracePeriodExpiresAt
        revocationDate = state.revocationDate
        revocationReason = state.revocationReason
        revocationType = state.revocationType
        supersededBy = state.supersededBy
    }

    /// The JSON object of an event's `before`/`after`: every field present, absent values as null.
    public var json: JSONObject {
        JSONObject([
            "status": .string(status),
            "isActive": .bool(isActive),
            "expiresDate": EntitlementEvent.date(expiresDate),
            "productId": EntitlementEvent.text(productId),
            "autoRenewStatus": EntitlementEvent.integer(autoRenewStatus),
            "autoRenewProductId": EntitlementEvent.text(autoRenewProductId),
            "gracePeriodExpiresDate": EntitlementEvent.date(gracePeriodExpiresDate),
            "revocationDate": EntitlementEvent.date(revocationDate),
            "revocationReason": EntitlementEvent.integer(revocationReason),
            "revocationType": EntitlementEvent.text(revocationType),
            "supersededBy": EntitlementEvent.text(supersededBy),
        ])
    }
}

extension EntitlementSnapshot: Decodable {
    enum CodingKeys: String, CodingKey {
        case status, isActive, expiresDate, productId, autoRenewStatus, autoRenewProductId, gracePeriodExpiresDate, revocationDate,
            revocationReason, revocationType, supersededBy
    }

    /// Reads back `json` (the last `after`, stored with the row so that the next event's `before` equals it), through
    /// the strict decoder (`JSONValueDecoder`): `status` and `isActive` required, the rest null when absent.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func date(_ key: CodingKeys) throws -> Timestamp? { try container.decodeIfPresent(String.self, forKey: key).flatMap(Timestamp.init(rfc3339:)) }
        func int(_ key: CodingKeys) throws -> Int32? { try container.decodeIfPresent(Int64.self, forKey: key).map { Int32(truncatingIfNeeded: $0) } }
        status = try container.decode(String.self, forKey: .status)
        isActive = try container.decode(Bool.self, forKey: .isActive)
        expiresDate = try date(.expiresDate)
        productId = try container.decodeIfPresent(String.self, forKey: .productId)
        autoRenewStatus = try int(.autoRenewStatus)
        autoRenewProductId = try container.decodeIfPresent(String.self, forKey: .autoRenewProductId)
        gracePeriodExpiresDate = try date(.gracePeriodExpiresDate)
        revocationDate = try date(.revocationDate)
        revocationReason = try int(.revocationReason)
        revocationType = try container.decodeIfPresent(String.self, forKey: .revocationType)
        supersededBy = try container.decodeIfPresent(String.self, forKey: .supersededBy)
    }
}

/// The CloudEvents `type` of an entitlement event.
public enum EntitlementEventType: String, Sendable, Hashable, CaseIterable {
    /// inactive → active (or a first event that grants).
    case granted = "entitlement.granted"
    /// active → inactive, whatever the cause: expiry, refund, revocation, billing retry past grace, migration.
    case revoked = "entitlement.revoked"
    /// active → active with a later expiry (product changed or not).
    case renewed = "entitlement.renewed"
    /// Any other change of a decisive field, and a first event that does not grant.
    case updated = "entitlement.updated"
    /// A purchase moved from one customer to another (the customer API's ownership policy).
    case transferred = "entitlement.transferred"
    /// Apple declined a refund request (REFUND_DECLINED): no row changes.
    case refundDeclined = "refund.declined"
    /// Apple asks for consumption data within 12 hours (CONSUMPTION_REQUEST).
    case consumptionRequested = "consumption.requested"
    /// A one-time purchase (ONE_TIME_CHARGE, or a notification about a non-subscription transaction).
    case oneTimePurchase = "purchase.one-time"
    /// A one-time purchase was refunded or revoked (REFUND or REVOKE of a non-subscription transaction).
    case oneTimePurchaseRefunded = "purchase.one-time.refunded"
    /// Apple's TEST notification reached the pipeline.
    case notificationTest = "notification.test"
    /// A parent or guardian withdrew consent for a child's use of the app (RESCIND_CONSENT, `appData`): Apple asks
    /// the developer to stop serving the app to that account and to handle its data as the law requires.
    case consentRescinded = "consent.rescinded"
    /// A customer was erased (docs/privacy.md): receivers delete their copies. No personal data: the subject is the
    /// erasure's request id, which whoever asked for the erasure holds.
    case customerErased = "customer.erased"
    /// A purchase redeemed an offer whose signature the customer API issued (docs/offers.md): which signature
    /// (its nonce), issued when, to whom. Outside the sequence: the purchase's own change is its entitlement event.
    case offerRedeemed = "offer.redeemed"

    /// Whether events of this type take a number in their subscription's sequence.
    public var isSequenced: Bool {
        switch self {
        case .granted, .revoked, .renewed, .updated, .transferred: true
        default: false
        }
    }

    /// The type of a change from `before` (nil: the subscription's first event) to `after`.
    public static func of(before: EntitlementSnapshot?, after: EntitlementSnapshot) -> EntitlementEventType {
        guard let before else { return after.isActive ? .granted : .updated }
        switch (before.isActive, after.isActive) {
        case (false, true): return .granted
        case (true, false): return .revoked
        case (true, true):
            if let old = before.expiresDate, let new = after.expiresDate, new > old { return .renewed }
            return .updated
        case (false, false): return .updated
        }
    }
}

/// What caused an event: one notification, status snapshot, history transaction or purchase.
public struct EntitlementEventCause: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        case notification, statusSnapshot, historyTransaction, purchase, erasure
    }

    public var kind: Kind
    public var notificationType: String?
    public var subtype: String?
    /// The cause's dedupe key: Apple's notificationUUID, or the pulled record's digest id.
    public var notificationUUID: String
    public var transactionId: String?
    public var signedDate: Timestamp

    public init(kind: Kind, notificationType: String?, subtype: String?, notificationUUID: String, transactionId: String?, signedDate: Timestamp) {
        self.kind = kind
        self.notificationType = notificationType
        self.subtype = subtype
        self.notificationUUID = notificationUUID
        self.transactionId = transactionId
        self.signedDate = signedDate
    }

    /// The cause of a verified notification (or pulled record) whose dedupe key is `key`.
    public init(_ notification: VerifiedNotification, key: String) {
        let type = notification.payload.rawNotificationType
        switch type {
        case StatusSnapshotDocument.notificationType: kind = .statusSnapshot
        case SignedPayloadVerifier.historyTransactionType: kind = .historyTransaction
        case EntitlementEventCause.purchaseType: kind = .purchase
        default: kind = .notification
        }
        notificationType = type
        subtype = notification.payload.rawSubtype
        notificationUUID = key
        transactionId = notification.transactionInfo?.model.transactionId
        signedDate = notification.signedDate
    }

    /// The synthetic notificationType of a purchase posted through the customer API.
    public static let purchaseType = "PURCHASE"

    var json: JSONObject {
        JSONObject([
            "kind": .string(kind.rawValue),
            "notificationType": EntitlementEvent.text(notificationType),
            "subtype": EntitlementEvent.text(subtype),
            "notificationUUID": .string(notificationUUID),
            "transactionId": EntitlementEvent.text(transactionId),
            "signedDate": EntitlementEvent.date(signedDate),
        ])
    }
}

/// One entitlement event, as the outbox holds it and the relay publishes it: CloudEvents 1.0 attributes and the
/// JSON `data`. Ids are derived from the cause and the subscription, so a redelivered or replayed batch (which
/// the ledger makes a no-op anyway) could only ever yield the same ids.
public struct EntitlementEvent: Sendable, Hashable {
    public var id: String
    public var type: EntitlementEventType
    /// `/apps/<bundleId>/<environment>`.
    public var source: String
    /// The Kafka key and `ce_subject`: the originalTransactionId, or the notificationUUID where there is none.
    public var subject: String
    /// The cause's signedDate.
    public var time: Timestamp
    /// The subscription's sequence number (1, 2, …), nil for types that take none.
    public var sequence: Int64?
    public var environment: String
    public var bundleId: String
    public var originalTransactionId: String?
    public var data: JSONObject
    /// The dedupe key of the cause (its notificationUUID or pulled record id): where the store finds the trace
    /// context the cause arrived with.
    public var causeKey: String

    /// A change of one subscription's decisive fields from `before` (the previous event's `after`; nil for the
    /// subscription's first event) to `state` as of `cause`. Nil when nothing decisive changed.
    public static func change(
        of state: EntitlementState, before: EntitlementSnapshot?, sequence: Int64, cause: EntitlementEventCause
    ) -> EntitlementEvent? {
        let after = EntitlementSnapshot(state, at: cause.signedDate)
        if let before, before == after { return nil }
        let type = EntitlementEventType.of(before: before, after: after)
        return make(
            type: type, environment: state.environment, bundleId: state.bundleId, subject: state.originalTransactionId,
            originalTransactionId: state.originalTransactionId, appAccountToken: state.appAccountToken, appTransactionId: state.appTransactionId,
            productId: state.productId, sequence: sequence, before: before.map { .object($0.json) } ?? .null, after: .object(after.json), cause: cause)
    }

    /// The event a notification makes by itself (no row change a backend could see, but one it acts on):
    /// refund declined, consumption requested, a one-time purchase or its refund, a test. Nil for the others.
    public static func ofNotification(_ notification: VerifiedNotification, cause: EntitlementEventCause) -> EntitlementEvent? {
        let transaction = notification.transactionInfo?.model
        let type: EntitlementEventType
        switch notification.payload.rawNotificationType {
        case "REFUND_DECLINED": type = .refundDeclined
        case "CONSUMPTION_REQUEST": type = .consumptionRequested
        case "TEST": type = .notificationTest
        case "ONE_TIME_CHARGE": type = .oneTimePurchase
        case "RESCIND_CONSENT":
            let appTransactionId = notification.appTransactionInfo?.model.appTransactionId
            return make(
                type: .consentRescinded, environment: notification.environment.rawValue, bundleId: notification.bundleId,
                subject: appTransactionId ?? cause.notificationUUID, originalTransactionId: nil, appAccountToken: nil, appTransactionId: appTransactionId,
                productId: nil, sequence: nil, before: .null, after: .null, cause: cause)
        case StatusSnapshotDocument.notificationType: return nil
        default:
            guard let transaction, transaction.rawType != nil, transaction.type != .autoRenewableSubscription else { return nil }
            let revoked = notification.payload.rawNotificationType == "REFUND" || notification.payload.rawNotificationType == "REVOKE"
            type = revoked ? .oneTimePurchaseRefunded : .oneTimePurchase
        }
        let original = transaction?.originalTransactionId
        var event = make(
            type: type, environment: notification.environment.rawValue, bundleId: notification.bundleId, subject: original ?? cause.notificationUUID,
            originalTransactionId: original, appAccountToken: transaction?.appAccountToken, appTransactionId: transaction?.appTransactionId,
            productId: transaction?.productId, sequence: nil, before: .null, after: .null, cause: cause)
        // What Apple revoked of a one-time purchase: all of it, or (REFUND_PRORATED) the share in revocationPercentage.
        if type == .oneTimePurchaseRefunded, let transaction {
            event.data["revocation"] = .object(JSONObject([
                "transactionId": text(transaction.transactionId), "revocationDate": date(transaction.revocationDate),
                "revocationReason": integer(transaction.rawRevocationReason), "revocationType": text(transaction.rawRevocationType),
                "revocationPercentage": integer(transaction.revocationPercentage), "quantity": integer(transaction.quantity),
            ]))
        }
        return event
    }

    /// A purchase changed owner (the customer API's ownership policy): `from` nil when it had none. Within the
    /// subscription's sequence when it has a row (`before` and `after` both the row's last `after`: access did not
    /// change, its owner did); outside it (sequence nil) for a one-time purchase.
    public static func transfer(
        environment: String, bundleId: String, originalTransactionId: String, productId: String?, appAccountToken: String?, appTransactionId: String?,
        from: String?, to: String, sequence: Int64?, snapshot: EntitlementSnapshot?, cause: EntitlementEventCause
    ) -> EntitlementEvent {
        let entitlement: JSONValue = snapshot.map { .object($0.json) } ?? .null
        var event = make(
            type: .transferred, environment: environment, bundleId: bundleId, subject: originalTransactionId, originalTransactionId: originalTransactionId,
            appAccountToken: appAccountToken, appTransactionId: appTransactionId, productId: productId, sequence: sequence, before: entitlement,
            after: entitlement, cause: cause)
        event.data["transfer"] = .object(JSONObject(["fromCustomerId": text(from), "toCustomerId": .string(to)]))
        return event
    }

    /// The event of a redeemed offer (`offer.redeemed`): the purchase's transaction and the signature it used.
    public static func offerRedeemed(
        _ notification: VerifiedNotification, cause: EntitlementEventCause, nonce: String, offerIdentifier: String, customerId: String, issuedAt: Timestamp
    ) -> EntitlementEvent? {
        guard let transaction = notification.transactionInfo?.model, let original = transaction.originalTransactionId else { return nil }
        var event = make(
            type: .offerRedeemed, environment: notification.environment.rawValue, bundleId: notification.bundleId, subject: original,
            originalTransactionId: original, appAccountToken: transaction.appAccountToken, appTransactionId: transaction.appTransactionId,
            productId: transaction.productId, sequence: nil, before: .null, after: .null, cause: cause)
        event.data["offer"] = .object(JSONObject([
            "offerIdentifier": .string(offerIdentifier), "offerType": integer(transaction.rawOfferType), "transactionId": text(transaction.transactionId),
            "nonce": .string(nonce), "customerId": .string(customerId), "issuedAt": date(issuedAt),
        ]))
        return event
    }

    /// The event of an erasure (`customer.erased`): nothing about the person, only the request and what was removed.
    public static func erasure(
        requestId: String, bundleId: String, environment: String, erasedAt: Timestamp, subscriptions: Int, notifications: Int, events: Int
    ) -> EntitlementEvent {
        let cause = EntitlementEventCause(
            kind: .erasure, notificationType: nil, subtype: nil, notificationUUID: "erasure:" + requestId, transactionId: nil, signedDate: erasedAt)
        var event = make(
            type: .customerErased, environment: environment, bundleId: bundleId, subject: requestId, originalTransactionId: nil, appAccountToken: nil,
            appTransactionId: nil, productId: nil, sequence: nil, before: .null, after: .null, cause: cause)
        event.data["erasure"] = .object(JSONObject([
            "requestId": .string(requestId), "erasedAt": date(erasedAt), "subscriptions": .number(JSONNumber(Int64(subscriptions))),
            "notifications": .number(JSONNumber(Int64(notifications))), "events": .number(JSONNumber(Int64(events))),
        ]))
        return event
    }

    static func make(
        type: EntitlementEventType, environment: String, bundleId: String, subject: String, originalTransactionId: String?, appAccountToken: String?,
        appTransactionId: String?, productId: String?, sequence: Int64?, before: JSONValue, after: JSONValue, cause: EntitlementEventCause
    ) -> EntitlementEvent {
        let data = JSONObject([
            "environment": .string(environment),
            "bundleId": .string(bundleId),
            "originalTransactionId": text(originalTransactionId),
            "appAccountToken": text(appAccountToken),
            "appTransactionId": text(appTransactionId),
            "productId": text(productId),
            "sequence": sequence.map { .number(JSONNumber($0)) } ?? .null,
            "before": before,
            "after": after,
            "cause": .object(cause.json),
        ])
        return EntitlementEvent(
            // A transfer shares its cause (the purchase) with the change the purchase made: its type keeps the ids apart.
            id: eventId(
                cause: cause.notificationUUID, environment: environment, bundleId: bundleId, subject: subject,
                type: type.isSequenced && type != .transferred ? nil : type),
            type: type, source: "/apps/\(bundleId)/\(environment)", subject: subject, time: cause.signedDate, sequence: sequence,
            environment: environment, bundleId: bundleId, originalTransactionId: originalTransactionId, data: data, causeKey: cause.notificationUUID)
    }

    /// A UUID-shaped id (version 5 layout) from SHA-256 of the cause and the subscription (and, for types outside
    /// the sequence, the type): stable across redeliveries, replays and processes.
    public static func eventId(cause: String, environment: String, bundleId: String, subject: String, type: EntitlementEventType? = nil) -> String {
        var hash = SHA256()
        for part in ["entitlement-event/v1", cause, environment, bundleId, subject, type?.rawValue ?? ""] {
            hash.update(data: Array(part.utf8))
            hash.update(data: [0])
        }
        var bytes = Array(hash.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = Hex.encode(bytes)
        let characters = Array(hex)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(characters[$0]) }.joined(separator: "-")
    }

    // MARK: - JSON helpers

    static func text(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
    static func integer(_ value: Int32?) -> JSONValue { value.map { .number(JSONNumber(Int64($0))) } ?? .null }
    static func date(_ value: Timestamp?) -> JSONValue { value.map { .string($0.rfc3339Milliseconds) } ?? .null }
}

/// The CloudEvents Kafka protocol binding's headers (binary content mode), as the relay sets them.
public enum CloudEventsHeader {
    public static let specVersion = "ce_specversion"
    public static let id = "ce_id"
    public static let source = "ce_source"
    public static let type = "ce_type"
    public static let subject = "ce_subject"
    public static let time = "ce_time"
    public static let contentType = "content-type"
    /// Every header the relay sets, in the order it sets them (the AsyncAPI document lists each).
    public static let all = [specVersion, id, source, type, subject, time, contentType]
    /// The CloudEvents distributed-tracing extension: the trace context of the notification that caused the event
    /// (present when tracing was on as it was handled).
    public static let traceparent = "ce_traceparent"
    /// With tracing on, the relay also sets these: the extension above and its own hop's W3C trace context.
    public static let tracing = [traceparent, TraceParent.header, "tracestate"]
}

extension Timestamp {
    /// RFC 3339 in UTC with milliseconds, e.g. `2026-01-02T03:04:05.006Z`.
    public var rfc3339Milliseconds: String {
        let millis = millisecondsSince1970
        let days = millis >= 0 ? millis / 86_400_000 : (millis - 86_399_999) / 86_400_000
        let dayMillis = millis - days * 86_400_000
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        let seconds = dayMillis / 1000
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(seconds / 3600, 2)):\(pad(seconds / 60 % 60, 2)):\(pad(seconds % 60, 2)).\(pad(dayMillis % 1000, 3))Z"
    }

    /// Parses what `rfc3339Milliseconds` writes (`YYYY-MM-DDTHH:MM:SS.mmmZ`), and the same without milliseconds.
    public init?(rfc3339 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 24 || bytes.count == 20, bytes.last == UInt8(ascii: "Z"), bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":")
        else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[range] {
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int64(byte - 48)
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13), let minute = number(14..<16),
            let second = number(17..<19), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var millis: Int64 = 0
        if bytes.count == 24 {
            guard bytes[19] == UInt8(ascii: "."), let value = number(20..<23) else { return nil }
            millis = value
        }
        // Howard Hinnant's days_from_civil.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        self.init(millisecondsSince1970: ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
    }
}
