import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import Foundation

/// `pipelinectl entitlements`: what a subscriber is entitled to now, and the notifications that said so.
struct EntitlementsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "entitlements",
        abstract: "Show current entitlement state and recent history for a subscription or an app user.",
        discussion: """
            Exactly one of --original-transaction-id, --app-account-token and --all. Exit status 1 when nothing matches.
            --all prints one line per entitlement (most recently signed first, at most --limit), without history.
            """)

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The subscription's originalTransactionId.") var originalTransactionId: String?
    @Option(help: "The app's user id (appAccountToken) set at purchase.") var appAccountToken: String?
    @Flag(help: "Every entitlement, as a table.") var all = false
    @Option(help: "With --all: the most entitlements to show.") var limit = 100
    @Option(help: "How many recent notifications to show per entitlement.") var history = 10
    @Flag(help: "Print JSON.") var json = false

    func validate() throws {
        guard [originalTransactionId != nil, appAccountToken != nil, all].filter({ $0 }).count == 1 else {
            throw ValidationError("give exactly one of --original-transaction-id, --app-account-token and --all")
        }
    }

    func run() async throws {
        let lookup: EntitlementLookup = all ? .all(limit: limit) : originalTransactionId.map { .originalTransactionId($0) } ?? .appAccountToken(appAccountToken ?? "")
        let historyLimit = all ? 0 : history
        let found = try await connection.configuration().withStore(logger: toolLogger) { store in
            var found: [(EntitlementRecord, [NotificationHistoryEntry])] = []
            for record in try await store.entitlements(lookup) {
                let history = historyLimit > 0 ? try await store.history(originalTransactionId: record.state.originalTransactionId, limit: historyLimit) : []
                found.append((record, history))
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
        } else if all {
            printTable(found.map(\.0))
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

    /// One line per entitlement, columns sized to their contents.
    func printTable(_ records: [EntitlementRecord]) {
        let header = ["ENVIRONMENT", "BUNDLE ID", "ORIGINAL TXN", "PRODUCT", "STATUS", "ACTIVE", "EXPIRES", "RENEWS TO", "LAST NOTIFICATION"]
        let rows = records.map { record -> [String] in
            let s = record.state
            return [
                s.environment, s.bundleId, s.originalTransactionId, s.productId ?? "-", s.status.rawValue, record.isActive ? "yes" : "no",
                s.expiresAt.map { $0.date.formatted(.iso8601.year().month().day()) } ?? "-",
                s.autoRenewStatus == 0 ? "off" : (s.autoRenewProductId.flatMap { $0 == s.productId ? nil : $0 } ?? "same"),
                s.lastNotificationType + (s.lastNotificationSubtype.map { "/" + $0 } ?? ""),
            ]
        }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        for row in [header] + rows {
            print(row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
        if records.isEmpty { print("no entitlements yet") }
    }
}
