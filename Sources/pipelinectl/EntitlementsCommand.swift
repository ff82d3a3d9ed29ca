import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import Foundation

/// `pipelinectl entitlements`: what a subscriber is entitled to now, and the notifications that said so.
struct EntitlementsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "entitlements",
        abstract: "Show current entitlement state and recent history for a subscription or an app user.",
        discussion: "Exactly one of --original-transaction-id and --app-account-token. Exit status 1 when nothing matches.")

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The subscription's originalTransactionId.") var originalTransactionId: String?
    @Option(help: "The app's user id (appAccountToken) set at purchase.") var appAccountToken: String?
    @Option(help: "How many recent notifications to show per entitlement.") var history = 10
    @Flag(help: "Print JSON.") var json = false

    func validate() throws {
        guard (originalTransactionId == nil) != (appAccountToken == nil) else {
            throw ValidationError("give exactly one of --original-transaction-id and --app-account-token")
        }
    }

    func run() async throws {
        let lookup: EntitlementLookup = originalTransactionId.map { .originalTransactionId($0) } ?? .appAccountToken(appAccountToken ?? "")
        let historyLimit = history
        let found = try await connection.configuration().withStore(logger: toolLogger) { store in
            var found: [(EntitlementRecord, [NotificationHistoryEntry])] = []
            for record in try await store.entitlements(lookup) {
                found.append((record, try await store.history(originalTransactionId: record.state.originalTransactionId, limit: historyLimit)))
            }
            return found
        }
        if json {
            printJSON(.array(found.map { record, history in
                let s = record.state
                return .object(JSONObject([
                    "environment": .string(s.environment), "bundleId": .string(s.bundleId), "originalTransactionId": .string(s.originalTransactionId),
                    "productId": jsonValue(s.productId), "status": .string(s.status.rawValue), "isActive": .bool(record.isActive),
                    "expiresAt": jsonValue(s.expiresAt), "gracePeriodExpiresAt": jsonValue(s.gracePeriodExpiresAt),
                    "autoRenewStatus": jsonValue(s.autoRenewStatus), "autoRenewProductId": jsonValue(s.autoRenewProductId),
                    "appAccountToken": jsonValue(s.appAccountToken), "ownershipType": jsonValue(s.ownershipType),
                    "lastNotificationType": .string(s.lastNotificationType), "lastNotificationSubtype": jsonValue(s.lastNotificationSubtype),
                    "lastSignedDate": jsonValue(s.lastSignedDate), "appleStatus": jsonValue(s.appleStatus),
                    "updatedAt": .string(record.updatedAt.formatted(.iso8601)),
                    "history": .array(history.map { entry in
                        .object(JSONObject([
                            "notificationUUID": .string(entry.notificationUUID), "notificationType": .string(entry.notificationType),
                            "subtype": jsonValue(entry.subtype), "signedDate": .string(entry.signedDate.formatted(.iso8601)),
                        ]))
                    }),
                ]))
            }))
        } else {
            for (record, history) in found {
                let s = record.state
                print("\(s.environment) \(s.bundleId) originalTransactionId=\(s.originalTransactionId)")
                print("  product \(s.productId ?? "-")  status \(s.status.rawValue)  active now: \(record.isActive ? "yes" : "no")")
                print("  expires \(s.expiresAt?.description ?? "-")  auto-renew \(s.autoRenewStatus.map(String.init) ?? "-") → \(s.autoRenewProductId ?? "-")")
                if let grace = s.gracePeriodExpiresAt { print("  grace period until \(grace)") }
                if let revoked = s.revocationDate { print("  revoked \(revoked) (reason \(s.revocationReason.map(String.init) ?? "-"))") }
                print("  app account token \(s.appAccountToken ?? "-")  ownership \(s.ownershipType ?? "-")")
                print("  last: \(s.lastNotificationType)\(s.lastNotificationSubtype.map { "/" + $0 } ?? "") signed \(s.lastSignedDate)")
                for entry in history {
                    print("    \(entry.signedDate.formatted(.iso8601))  \(entry.notificationType)\(entry.subtype.map { "/" + $0 } ?? "")  \(entry.notificationUUID)")
                }
            }
            if found.isEmpty { print("no entitlement matches") }
        }
        if found.isEmpty { throw ExitCode(1) }
    }
}
