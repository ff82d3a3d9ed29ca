/// [NotificationHistoryRequest](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryrequest):
/// the body of Get Notification History. Dates are milliseconds since 1970; at most one of the type filter and
/// `transactionId` (Apple answers 4000019 to both).
public struct NotificationHistoryRequest: Sendable, Hashable {
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

    /// Reads a request body (the fake API's side).
    public init(json object: JSONObject) throws(ModelDecodingError) {
        let reader = ModelReader(object, path: "NotificationHistoryRequest")
        startDate = try reader.int64("startDate")
        endDate = try reader.int64("endDate")
        notificationType = try reader.optionalString("notificationType")
        notificationSubtype = try reader.optionalString("notificationSubtype")
        transactionId = try reader.optionalString("transactionId")
        onlyFailures = try reader.optionalBool("onlyFailures")
    }
}

/// [sendAttemptResult](https://developer.apple.com/documentation/appstoreserverapi/sendattemptresult): kept raw,
/// so a value Apple adds later is carried, not refused.
public struct SendAttemptResult: Sendable, Hashable, CustomStringConvertible {
    public var rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
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
public struct SendAttemptItem: Sendable, Hashable {
    public var attemptDate: Int64?
    public var sendAttemptResult: SendAttemptResult?

    public init(attemptDate: Int64?, sendAttemptResult: SendAttemptResult?) {
        self.attemptDate = attemptDate
        self.sendAttemptResult = sendAttemptResult
    }

    init(json object: JSONObject, path: String) throws(ModelDecodingError) {
        let reader = ModelReader(object, path: path)
        attemptDate = try reader.optionalInt64("attemptDate")
        sendAttemptResult = try reader.optionalString("sendAttemptResult").map(SendAttemptResult.init)
    }

    public var json: JSONValue {
        var object = JSONObject()
        if let attemptDate { object["attemptDate"] = .number(JSONNumber(attemptDate)) }
        if let sendAttemptResult { object["sendAttemptResult"] = .string(sendAttemptResult.rawValue) }
        return .object(object)
    }
}

/// [notificationHistoryResponseItem](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryresponseitem)
public struct NotificationHistoryResponseItem: Sendable, Hashable {
    public var signedPayload: String
    public var sendAttempts: [SendAttemptItem]

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
public struct NotificationHistoryResponse: Sendable, Hashable {
    public var notificationHistory: [NotificationHistoryResponseItem]
    public var hasMore: Bool
    /// The token for the next page (present while `hasMore`).
    public var paginationToken: String?

    public init(notificationHistory: [NotificationHistoryResponseItem], hasMore: Bool, paginationToken: String?) {
        self.notificationHistory = notificationHistory
        self.hasMore = hasMore
        self.paginationToken = paginationToken
    }

    public init(json object: JSONObject) throws(ModelDecodingError) {
        let reader = ModelReader(object, path: "NotificationHistoryResponse")
        var items: [NotificationHistoryResponseItem] = []
        for (index, element) in try reader.array("notificationHistory").enumerated() {
            let path = "notificationHistory[\(index)]"
            guard case .object(let item) = element else { throw ModelDecodingError(path: path, reason: "is \(element.typeName), not an object") }
            let itemReader = ModelReader(item, path: path)
            let signedPayload = try itemReader.string("signedPayload")
            var attempts: [SendAttemptItem] = []
            for (attemptIndex, attempt) in try itemReader.optionalArray("sendAttempts").enumerated() {
                guard case .object(let attemptObject) = attempt else {
                    throw ModelDecodingError(path: "\(path).sendAttempts[\(attemptIndex)]", reason: "is \(attempt.typeName), not an object")
                }
                attempts.append(try SendAttemptItem(json: attemptObject, path: "\(path).sendAttempts[\(attemptIndex)]"))
            }
            items.append(NotificationHistoryResponseItem(signedPayload: signedPayload, sendAttempts: attempts))
        }
        notificationHistory = items
        hasMore = try reader.optionalBool("hasMore") ?? false
        paginationToken = try reader.optionalString("paginationToken")
        if hasMore, paginationToken?.isEmpty ?? true {
            throw ModelDecodingError(path: "NotificationHistoryResponse.paginationToken", reason: "is missing although hasMore is true")
        }
    }

    public var json: JSONObject {
        var object = JSONObject(["notificationHistory": .array(notificationHistory.map(\.json)), "hasMore": .bool(hasMore)])
        if let paginationToken { object["paginationToken"] = .string(paginationToken) }
        return object
    }
}

/// [SendTestNotificationResponse](https://developer.apple.com/documentation/appstoreserverapi/sendtestnotificationresponse)
public struct SendTestNotificationResponse: Sendable, Hashable {
    public var testNotificationToken: String

    public init(testNotificationToken: String) { self.testNotificationToken = testNotificationToken }

    public init(json object: JSONObject) throws(ModelDecodingError) {
        testNotificationToken = try ModelReader(object, path: "SendTestNotificationResponse").string("testNotificationToken")
    }
}

/// [CheckTestNotificationResponse](https://developer.apple.com/documentation/appstoreserverapi/checktestnotificationresponse)
public struct CheckTestNotificationResponse: Sendable, Hashable {
    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]

    public init(signedPayload: String?, sendAttempts: [SendAttemptItem]) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }

    public init(json object: JSONObject) throws(ModelDecodingError) {
        let reader = ModelReader(object, path: "CheckTestNotificationResponse")
        signedPayload = try reader.optionalString("signedPayload")
        var attempts: [SendAttemptItem] = []
        for (index, attempt) in try reader.optionalArray("sendAttempts").enumerated() {
            guard case .object(let attemptObject) = attempt else { throw ModelDecodingError(path: "sendAttempts[\(index)]", reason: "is \(attempt.typeName), not an object") }
            attempts.append(try SendAttemptItem(json: attemptObject, path: "sendAttempts[\(index)]"))
        }
        sendAttempts = attempts
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

/// Typed reads from a JSON object, each failure naming the field. Unknown fields are ignored (kept by the caller
/// where it keeps raw data), so Apple adding one never breaks a run.
struct ModelReader {
    let object: JSONObject
    let path: String

    init(_ object: JSONObject, path: String) {
        self.object = object
        self.path = path
    }

    func fail(_ key: String, _ reason: String) -> ModelDecodingError { ModelDecodingError(path: "\(path).\(key)", reason: reason) }

    func string(_ key: String) throws(ModelDecodingError) -> String {
        guard let value = try optionalString(key) else { throw fail(key, "is missing") }
        return value
    }

    func optionalString(_ key: String) throws(ModelDecodingError) -> String? {
        switch object[key] {
        case nil, .null?: return nil
        case .string(let value)?: return value
        case let other?: throw fail(key, "is \(other.typeName), not a string")
        }
    }

    func int64(_ key: String) throws(ModelDecodingError) -> Int64 {
        guard let value = try optionalInt64(key) else { throw fail(key, "is missing") }
        return value
    }

    func optionalInt64(_ key: String) throws(ModelDecodingError) -> Int64? {
        switch object[key] {
        case nil, .null?: return nil
        case .number(let number)?:
            guard let value = number.int64Value else { throw fail(key, "is \(number.literal), not a whole number") }
            return value
        case let other?: throw fail(key, "is \(other.typeName), not a number")
        }
    }

    func optionalBool(_ key: String) throws(ModelDecodingError) -> Bool? {
        switch object[key] {
        case nil, .null?: return nil
        case .bool(let value)?: return value
        case let other?: throw fail(key, "is \(other.typeName), not a boolean")
        }
    }

    func array(_ key: String) throws(ModelDecodingError) -> [JSONValue] {
        switch object[key] {
        case nil, .null?: throw fail(key, "is missing")
        case .array(let values)?: return values
        case let other?: throw fail(key, "is \(other.typeName), not an array")
        }
    }

    func optionalArray(_ key: String) throws(ModelDecodingError) -> [JSONValue] {
        object[key] == nil || object[key] == .null ? [] : try array(key)
    }
}
