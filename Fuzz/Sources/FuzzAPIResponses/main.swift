import AppStoreNotifications
import AppStoreServerAPIModels
import FuzzSupport

/// libFuzzer target: the App Store Server API client's answer decoders (Get Notification History, Request a Test
/// Notification, Get Test Notification Status, Get All Subscription Statuses, Get Transaction History), on what a
/// compromised proxy or a changed API could send. The first byte chooses the decoder; the rest is the answer.
///
/// Properties: no crash, leak or hang; a refusal names the field and carries no raw control characters (it becomes
/// an `AppStoreServerAPIError` that operators read); what decodes and has an encoding (history pages, test
/// status) encodes and decodes back to the same value; nothing signed is invented: every JWS the decoded answer
/// hands on (to the verifier, then the topic) is a string of the answer as sent.
public func apiResponsesFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let decoder = data[0] % 5
    guard let object = try? StrictJSONParser().parseObject(Array(UnsafeBufferPointer(start: data + 1, count: size - 1))) else { return 0 }
    let sent = strings(in: .object(object))
    do throws(ModelDecodingError) {
        switch decoder {
        case 0:
            let page = try ModelDecodingError.decode(NotificationHistoryResponse.self, from: .object(object))
            precondition((try? ModelDecodingError.decode(NotificationHistoryResponse.self, from: .object(page.json))) == page, "a history page does not survive its own encoding")
            for item in page.notificationHistory { precondition(sent.contains(item.signedPayload), "a history item's signedPayload was invented") }
        case 1:
            let answer = try ModelDecodingError.decode(SendTestNotificationResponse.self, from: .object(object))
            precondition(sent.contains(answer.testNotificationToken), "the test notification token was invented")
        case 2:
            let status = try ModelDecodingError.decode(CheckTestNotificationResponse.self, from: .object(object))
            precondition((try? ModelDecodingError.decode(CheckTestNotificationResponse.self, from: .object(status.json))) == status, "a test notification status does not survive its own encoding")
            if let signed = status.signedPayload { precondition(sent.contains(signed), "the test notification's signedPayload was invented") }
            _ = status.lastSendAttemptResult
        case 3:
            let statuses = try ModelDecodingError.decode(StatusResponse.self, from: .object(object))
            for group in statuses.data {
                for item in group.lastTransactions {
                    for signed in [item.signedTransactionInfo, item.signedRenewalInfo].compactMap({ $0 }) { precondition(sent.contains(signed), "a status's JWS was invented") }
                }
            }
            _ = statuses.snapshots
        default:
            let history = try ModelDecodingError.decode(HistoryResponse.self, from: .object(object))
            for signed in history.signedTransactions { precondition(sent.contains(signed), "a history transaction was invented") }
            precondition(!history.hasMore || object["hasMore"] != nil, "hasMore without Apple saying so")
        }
    } catch {
        checkRefusal(code: "malformedResponse", reason: error.description, "API answer decoding")
    }
    return 0
}

/// Every string value anywhere in `value`.
func strings(in value: JSONValue) -> Set<String> {
    switch value {
    case .string(let string): return [string]
    case .array(let elements): return elements.reduce(into: []) { $0.formUnion(strings(in: $1)) }
    case .object(let object): return object.members.reduce(into: []) { $0.formUnion(strings(in: $1.value)) }
    default: return []
    }
}

/// The executable's entry point (SwiftPM makes `FuzzAPIResponses_main` the process's `main`): libFuzzer's driver.
@_cdecl("FuzzAPIResponses_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runLibFuzzer(argc, argv) { data, size in apiResponsesFuzz(data, size) }
}
