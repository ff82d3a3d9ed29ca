import AppStoreNotifications
/// [NotificationHistoryRequest](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryrequest):
/// the body of Get Notification History. Dates are milliseconds since 1970; at most one of the type filter and
/// `transactionId` (Apple answers 4000019 to both).
public struct NotificationHistoryRequest: Sendable, Hashable, Decodable {
    public var startDate: Int64
    public var endDate: Int64
    public var notificationType: String?
    public var notificationSubtype: String?
    public var transactionId: String?
    public var onlyFailures: Bool?

    public init(startDate: Int64, endDate: Int64, notificationType: String? = nil, notificationSubtype: String? = nil, transactionId: String? = nil, onlyFailures: Bool? = nil) {
        self.startDate = startDate
        self.endDate = endDate
        self.notificationType = notificationType
        self.notificationSubtype = notificationSubtype
        self.transactionId = transactionId
        self.onlyFailures = onlyFailures
    }

    public var json: JSONObject {
        var object = JSONObject(["startDate": .number(JSONNumber(startDate)), "endDate": .number(JSONNumber(endDate))])
        if let notificationType { object["notificationType"] = .string(notificationType) }
        if let notificationSubtype { object["notificationSubtype"] = .string(notificationSubtype) }
        if let transactionId { object["transactionId"] = .string(transactionId) }
        if let onlyFailures { object["onlyFailures"] = .bool(onlyFailures) }
        return object
    }
}

/// [sendAttemptResult](https://developer.apple.com/documentation/appstoreserverapi/sendattemptresult): kept raw,
/// so a value Apple adds later is carried, not refused.
public struct SendAttemptResult: Sendable, Hashable, CustomStringConvertible, Decodable {
    public var rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    public var description: String { rawValue }

    public static let success = SendAttemptResult("SUCCESS")
    public static let timedOut = SendAttemptResult("TIMED_OUT")
    public static let tlsIssue = SendAttemptResult("TLS_ISSUE")
    public static let circularRedirect = SendAttemptResult("CIRCULAR_REDIRECT")
    public static let noResponse = SendAttemptResult("NO_RESPONSE")
    public static let socketIssue = SendAttemptResult("SOCKET_ISSUE")
    public static let unsupportedCharset = SendAttemptResult("UNSUPPORTED_CHARSET")
    public static let invalidResponse = SendAttemptResult("INVALID_RESPONSE")
    public static let prematureClose = SendAttemptResult("PREMATURE_CLOSE")
    public static let unsuccessfulHTTPResponseCode = SendAttemptResult("UNSUCCESSFUL_HTTP_RESPONSE_CODE")
    public static let other = SendAttemptResult("OTHER")

    public static let known: Set<SendAttemptResult> = [
        .success, .timedOut, .tlsIssue, .circularRedirect, .noResponse, .socketIssue, .unsupportedCharset, .invalidResponse, .prematureClose,
        .unsuccessfulHTTPResponseCode, .other,
    ]
    public var isKnown: Bool { Self.known.contains(self) }
}

/// [sendAttemptItem](https://developer.apple.com/documentation/appstoreserverapi/sendattemptitem)
public struct SendAttemptItem: Sendable, Hashable, Decodable {
    public var attemptDate: Int64?
    public var sendAttemptResult: SendAttemptResult?

    public init(attemptDate: Int64?, sendAttemptResult: SendAttemptResult?) {
        self.attemptDate = attemptDate
        self.sendAttemptResult = sendAttemptResult
    }

    public var json: JSONValue {
        var object = JSONObject()
        if let attemptDate { object["attemptDate"] = .number(JSONNumber(attemptDate)) }
        if let sendAttemptResult { object["sendAttemptResult"] = .string(sendAttemptResult.rawValue) }
        return .object(object)
    }
}

/// [notificationHistoryResponseItem](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryresponseitem)
public struct NotificationHistoryResponseItem: Sendable, Hashable, Decodable {
    public var signedPayload: String
    public var sendAttempts: [SendAttemptItem]

    enum CodingKeys: String, CodingKey { case signedPayload, sendAttempts }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        signedPayload = try container.decode(String.self, forKey: .signedPayload)
        sendAttempts = try container.decodeIfPresent([SendAttemptItem].self, forKey: .sendAttempts) ?? []
    }

    public init(signedPayload: String, sendAttempts: [SendAttemptItem]) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }

    /// The newest attempt's result (attempts are not promised in order).
    public var lastSendAttemptResult: SendAttemptResult? {
        sendAttempts.enumerated().max { ($0.element.attemptDate ?? .min, $0.offset) < ($1.element.attemptDate ?? .min, $1.offset) }?.element.sendAttemptResult
    }

    public var json: JSONValue {
        .object(JSONObject(["signedPayload": .string(signedPayload), "sendAttempts": .array(sendAttempts.map(\.json))]))
    }
}

/// [NotificationHistoryResponse](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryresponse)
public struct NotificationHistoryResponse: Sendable, Hashable, Decodable {
    public var notificationHistory: [NotificationHistoryResponseItem]
    public var hasMore: Bool
    /// The token for the next page (present while `hasMore`).
    public var paginationToken: String?

    public init(notificationHistory: [NotificationHistoryResponseItem], hasMore: Bool, paginationToken: String?) {
        self.notificationHistory = notificationHistory
        self.hasMore = hasMore
        self.paginationToken = paginationToken
    }

    enum CodingKeys: String, CodingKey { case notificationHistory, hasMore, paginationToken }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        notificationHistory = try container.decode([NotificationHistoryResponseItem].self, forKey: .notificationHistory)
        hasMore = try container.decodeIfPresent(Bool.self, forKey: .hasMore) ?? false
        paginationToken = try container.decodeIfPresent(String.self, forKey: .paginationToken)
        if hasMore, paginationToken?.isEmpty ?? true {
            throw DecodingError.keyNotFound(CodingKeys.paginationToken, .init(codingPath: decoder.codingPath, debugDescription: "is missing although hasMore is true"))
        }
    }

    public var json: JSONObject {
        var object = JSONObject(["notificationHistory": .array(notificationHistory.map(\.json)), "hasMore": .bool(hasMore)])
        if let paginationToken { object["paginationToken"] = .string(paginationToken) }
        return object
    }
}

/// [SendTestNotificationResponse](https://developer.apple.com/documentation/appstoreserverapi/sendtestnotificationresponse)
public struct SendTestNotificationResponse: Sendable, Hashable, Decodable {
    public var testNotificationToken: String

    public init(testNotificationToken: String) { self.testNotificationToken = testNotificationToken }
}

/// [CheckTestNotificationResponse](https://developer.apple.com/documentation/appstoreserverapi/checktestnotificationresponse)
public struct CheckTestNotificationResponse: Sendable, Hashable, Decodable {
    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]

    public init(signedPayload: String?, sendAttempts: [SendAttemptItem]) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }

    enum CodingKeys: String, CodingKey { case signedPayload, sendAttempts }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        signedPayload = try container.decodeIfPresent(String.self, forKey: .signedPayload)
        sendAttempts = try container.decodeIfPresent([SendAttemptItem].self, forKey: .sendAttempts) ?? []
    }

    public var json: JSONObject {
        var object = JSONObject(["sendAttempts": .array(sendAttempts.map(\.json))])
        if let signedPayload { object["signedPayload"] = .string(signedPayload) }
        return object
    }

    /// The newest attempt's result.
    public var lastSendAttemptResult: SendAttemptResult? {
        NotificationHistoryResponseItem(signedPayload: "", sendAttempts: sendAttempts).lastSendAttemptResult
    }
}

/// An API answer that does not have Apple's documented shape.
public struct ModelDecodingError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var reason: String
    public var description: String { "\(path) \(reason)" }
}

extension ModelDecodingError {
    /// Decodes one of Apple's answers with the strict decoder the verifier uses (no coercion between JSON types);
    /// a failure names the field by its path in the answer (`NotificationHistoryResponse.notificationHistory[0].signedPayload is missing`).
    public static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws(ModelDecodingError) -> T {
        do {
            return try JSONValueDecoder().decode(type, from: value)
        } catch let error as DecodingError {
            throw ModelDecodingError(error, root: String(describing: type))
        } catch {
            throw ModelDecodingError(path: String(describing: type), reason: "\(error)")
        }
    }

    init(_ error: DecodingError, root: String) {
        func path(_ keys: [any CodingKey]) -> String {
            keys.reduce(root) { text, key in key.intValue.map { text + "[\($0)]" } ?? text + "." + key.stringValue }
        }
        switch error {
        case .keyNotFound(let key, let context):
            self.init(path: path(context.codingPath + [key]), reason: context.debugDescription.hasPrefix("is ") ? context.debugDescription : "is missing")
        case .valueNotFound(_, let context):
            self.init(path: path(context.codingPath), reason: "is null")
        case .typeMismatch(_, let context), .dataCorrupted(let context):
            self.init(path: path(context.codingPath), reason: "is not what Apple documents: \(context.debugDescription)")
        @unknown default:
            self.init(path: root, reason: "\(error)")
        }
    }
}
