import AppStoreNotifications
import Foundation
import TestSupport

/// The demo stream of `scripts/run.sh`: a fresh Apple-shaped test root (PEM, to the file named by the first
/// argument; the demo's workers trust it in addition to Apple's) and, on stdout, one HTTP body per line in
/// sending order: realistic subscription lifecycles (purchase, renewals, voluntary expiry, billing grace and
/// recovery, refund, a downgrade that takes effect at the next renewal) signed as Apple would, with duplicates, a few forged copies, a
/// notification of a second app that the demo does not configure at first (it is dead-lettered, then accepted
/// after the configuration names it and it is re-driven), and a malformed body. The keys exist only in this
/// process; nothing private is written anywhere.
@main
struct DemoNotifications {
    /// The app the demo's workers accept, and the one they learn about later.
    static let app = "com.example.pipeline.app"
    static let laterApp = "com.example.pipeline.later"

    static func main() throws {
        let arguments = CommandLine.arguments
        if arguments.dropFirst().contains(where: { $0 == "--help" || $0 == "-h" }) {
            print("usage: demo-notifications ROOT_PEM_OUTPUT [SUBSCRIPTIONS [PURCHASE_JSON_OUTPUT | --plain]]\n  the demo's signed notification stream, one body a line on stdout; reads no environment")
            exit(0)
        }
        guard arguments.count >= 2 else {
            FileHandle.standardError.write(Data("usage: demo-notifications ROOT_PEM_OUTPUT [SUBSCRIPTIONS [PURCHASE_JSON_OUTPUT | --plain]]\n".utf8))
            exit(2)
        }
        // `--plain`: only the minted lifecycles' bodies, each once, in sending order (scripts/chaos.py adds its own
        // duplicates and forgeries, and needs to know exactly which bodies are genuine).
        let plain = arguments.count >= 4 && arguments[3] == "--plain"
        let subscriptions = arguments.count >= 3 ? Int(arguments[2]) ?? 20 : 20
        let authority = try TestCertificateAuthority()
        let chain = try authority.issueChain()
        try Data((try authority.rootCertificate.serializeAsPEM().pemString + "\n").utf8).write(to: URL(fileURLWithPath: arguments[1]))

        // Lifecycles that started 70 days ago: some subscriptions are active now, some expired, one refunded.
        let start = Int64(Date().timeIntervalSince1970 * 1000) - 70 * 86_400_000
        var events = NotificationMinter.lifecycleEvents(subscriptions: subscriptions, start: start)
        // A pending downgrade takes effect at the next renewal: the basic product from then on.
        let month: Int64 = 30 * 86_400_000
        events += events.filter { $0.subtype == "DOWNGRADE" }.map { downgrade in
            var renewal = downgrade
            renewal.notificationType = "DID_RENEW"
            renewal.subtype = nil
            renewal.notificationUUID = UUID(uuidString: "00000000-0000-4000-8000-" + String(downgrade.originalTransactionId.suffix(12)))!.uuidString
            renewal.transactionId = downgrade.transactionId + "9"
            renewal.productId = "com.example.pipeline.basic.monthly"
            renewal.price = 4990
            renewal.purchaseDate = downgrade.expiresDate
            renewal.expiresDate = downgrade.expiresDate + month
            renewal.signedDate = downgrade.expiresDate + 1_000
            return renewal
        }
        let minter = NotificationMinter(chain: chain, bundleId: app)
        let bodies = events.map { NotificationMinter.body(minter.signedNotification($0)) }
        if plain {
            for body in bodies { print(body) }
            FileHandle.standardError.write(Data("plain stream: \(bodies.count) notifications of \(subscriptions) subscriptions (\(app))\n".utf8))
            return
        }

        var stream: [String] = []
        var duplicates = 0
        for (index, body) in bodies.enumerated() {
            stream.append(body)
            if index % 5 == 2 {  // Apple retries: the same body again
                stream.append(body)
                duplicates += 1
            }
        }
        // Forged: a signature byte changed; and a payload re-signed by a key Apple never certified.
        var forged = Array(bodies[0].utf8)
        let position = forged.count - 12  // inside the signature segment, before the closing `"}`
        forged[position] = forged[position] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        stream.append(String(decoding: forged, as: UTF8.self))
        let stranger = NotificationMinter(chain: try TestCertificateAuthority().issueChain(), bundleId: app)
        stream.append(NotificationMinter.body(stranger.signedNotification(events[1])))
        // A genuine notification of an app the demo's workers are not configured for yet.
        let fiveDaysAgo = start + 65 * 86_400_000
        var laterEvent = NotificationMinter.lifecycleEvents(subscriptions: 1, firstSubscription: 9_000, start: fiveDaysAgo)[0]
        laterEvent.productId = "com.example.pipeline.later.yearly"
        laterEvent.expiresDate = laterEvent.purchaseDate + 365 * 86_400_000
        stream.append(NotificationMinter.body(NotificationMinter(chain: chain, bundleId: laterApp).signedNotification(laterEvent)))
        stream.append(#"{"signedPayload": 42}"#)

        // A purchase made just now, as the app's backend receives it from StoreKit (customer-api's demo), and the
        // SUBSCRIBED notification Apple sends for it a little later.
        if arguments.count >= 4, !plain {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let customer = "6f1c2a52-7f1e-4a43-9f6e-3b1d2e4c5a69"
            var bought = NotificationMinter.SubscriptionEvent(
                notificationType: "SUBSCRIBED", subtype: "INITIAL_BUY", notificationUUID: UUID().uuidString.lowercased(), signedDate: now - 2_000,
                originalTransactionId: "2000000777000001", transactionId: "2000000777000001", purchaseDate: now - 2_000, expiresDate: now - 2_000 + month,
                appAccountToken: customer)
            bought.productId = "com.example.pipeline.pro.monthly"
            var notification = bought
            notification.signedDate = now
            let purchase = JSONObject([
                "customerId": .string(customer), "signedTransaction": .string(chain.sign(minter.transaction(bought))),
                "signedRenewalInfo": .string(chain.sign(minter.renewalInfo(bought))), "notificationBody": .string(NotificationMinter.body(minter.signedNotification(notification))),
            ])
            try Data(purchase.serialized.utf8).write(to: URL(fileURLWithPath: arguments[3]))
        }

        for body in stream { print(body) }
        FileHandle.standardError.write(Data("""
            demo stream: \(bodies.count) notifications of \(subscriptions) subscriptions (\(app)), \(duplicates) duplicates, \
            2 forged, 1 of \(laterApp) (not configured yet), 1 malformed body\n
            """.utf8))
    }
}
