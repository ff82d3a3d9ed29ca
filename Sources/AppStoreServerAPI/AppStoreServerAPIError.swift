import Foundation

/// A call to the App Store Server API that did not succeed, with what Apple said and whether trying again can help.
public struct AppStoreServerAPIError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Apple answered with an error status (and, usually, `{errorCode, errorMessage}`).
        case response
        /// No answer: connection refused or dropped, deadline passed.
        case transport
        /// A 2xx answer that is not what Apple documents (not JSON, a field missing or of the wrong type).
        case malformedResponse
        /// Retries used up (the last failure is in `reason`).
        case retriesExhausted
        /// Not sent: our own per-app rate limit would have made the call wait longer than
        /// `RateLimits.maximumWait` (`retryAfter` says when it could go).
        case throttled
    }

    public var kind: Kind
    /// The HTTP status, when Apple answered.
    public var httpStatus: Int?
    /// Apple's `errorCode` (e.g. 4000006), when the body had one.
    public var errorCode: Int64?
    /// Apple's `errorMessage`, escaped and bounded (it is a remote party's text).
    public var errorMessage: String?
    /// `Retry-After` of a 429: when Apple allows the next call.
    public var retryAfter: Date?
    /// What happened, in words a person can act on.
    public var reason: String
    /// The endpoint, e.g. `POST /inApps/v1/notifications/history`.
    public var endpoint: String

    public init(kind: Kind, httpStatus: Int? = nil, errorCode: Int64? = nil, errorMessage: String? = nil, retryAfter: Date? = nil, reason: String, endpoint: String) {
        self.kind = kind
        self.httpStatus = httpStatus
        self.errorCode = errorCode
        self.errorMessage = errorMessage
        self.retryAfter = retryAfter
        self.reason = reason
        self.endpoint = endpoint
    }

    /// Apple's name for `errorCode` (e.g. `InvalidTransactionIdError`), when known.
    public var errorName: String? { errorCode.flatMap { AppleErrorCode.names[$0] } }

    /// Whether the same request may succeed later: Apple's retryable codes, the rate limit, 5xx and lost
    /// connections; never a refusal of the request itself (4xx other than those).
    public var isRetryable: Bool {
        switch kind {
        case .transport: return true
        case .malformedResponse, .retriesExhausted, .throttled: return false
        case .response:
            if let errorCode { return AppleErrorCode.retryable.contains(errorCode) || errorCode == AppleErrorCode.rateLimitExceeded }
            guard let httpStatus else { return false }
            return httpStatus == 429 || httpStatus >= 500
        }
    }

    public var description: String {
        var text = "\(endpoint): "
        if let httpStatus { text += "HTTP \(httpStatus)" }
        if let errorCode { text += (httpStatus == nil ? "" : ", ") + "Apple error \(errorCode)" + (errorName.map { " \($0)" } ?? "") }
        if let errorMessage { text += " \"\(errorMessage)\"" }
        if httpStatus != nil || errorCode != nil { text += ": " }
        return text + reason
    }
}

/// Apple's documented error codes (https://developer.apple.com/documentation/appstoreserverapi/error_codes).
public enum AppleErrorCode {
    /// Apple documents these as "errors to retry".
    public static let retryable: Set<Int64> = [4_040_002, 4_040_004, 4_040_006, 5_000_001]
    public static let rateLimitExceeded: Int64 = 4_290_000
    public static let testNotificationNotFound: Int64 = 4_040_008
    public static let invalidPaginationToken: Int64 = 4_000_014
    public static let paginationTokenExpired: Int64 = 4_000_017
    /// FamilyTransactionNotSupportedError: Set App Account Token refuses a family-shared transaction.
    public static let familyTransactionNotSupported: Int64 = 4_000_185

    public static let names: [Int64: String] = [
        4_000_000: "GeneralBadRequestError", 4_000_002: "InvalidAppIdentifierError", 4_000_005: "InvalidRequestRevisionError",
        4_000_006: "InvalidTransactionIdError", 4_000_008: "InvalidOriginalTransactionIdError", 4_000_011: "InvalidRequestIdentifierError",
        4_000_012: "StartDateTooFarInPastError", 4_000_013: "StartDateAfterEndDateError", 4_000_014: "InvalidPaginationTokenError",
        4_000_015: "InvalidStartDateError", 4_000_016: "InvalidEndDateError", 4_000_017: "PaginationTokenExpiredError",
        4_000_018: "InvalidNotificationTypeError", 4_000_019: "MultipleFiltersSuppliedError", 4_000_020: "InvalidTestNotificationTokenError",
        4_000_021: "InvalidSortError", 4_000_022: "InvalidProductTypeError", 4_000_023: "InvalidProductIdError",
        4_000_024: "InvalidSubscriptionGroupIdentifierError", 4_000_026: "InvalidInAppOwnershipTypeError", 4_000_031: "InvalidStatusError",
        4_000_009: "InvalidExtendByDaysError", 4_000_010: "InvalidExtendReasonCodeError", 4_000_104: "InvalidStorefrontCountryCodeError",
        4_030_004: "SubscriptionExtensionIneligibleError", 4_030_005: "SubscriptionMaxExtensionError", 4_030_007: "FamilySharedSubscriptionExtensionIneligibleError",
        4_040_009: "InvalidRequestIdentifierError",
        4_040_001: "AccountNotFoundError", 4_040_002: "AccountNotFoundRetryableError", 4_040_003: "AppNotFoundError",
        4_040_004: "AppNotFoundRetryableError", 4_040_005: "OriginalTransactionIdNotFoundError", 4_040_006: "OriginalTransactionIdNotFoundRetryableError",
        4_040_007: "ServerNotificationUrlNotFoundError", 4_040_008: "TestNotificationNotFoundError", 4_040_010: "TransactionIdNotFoundError",
        4_290_000: "RateLimitExceededError", 5_000_000: "GeneralInternalError", 5_000_001: "GeneralInternalRetryableError",
    ]

    /// What a 401 means in practice: Apple says no more than "unauthorized".
    public static let unauthorizedExplanation =
        "Apple refused the token: check APPSTORE_KEY_ID (the key's id), APPSTORE_ISSUER_ID (the team's issuer id) and that "
        + "APPSTORE_PRIVATE_KEY_FILE is that key's .p8; a Production call for an app with no production release yet is also refused with 401"
}
