import AppStoreNotifications
import TestSigning
import Testing

/// The routing key ingest reads from the unverified payload (the Kafka key) is the one the worker reads from the
/// verified payload, for every kind of notification: the rows a worker keys by it stay on the partition, and the
/// shard, its record came from.
@Suite("Routing key: ingest's unverified reading and the worker's verified one agree")
struct RoutingKeyTests: MintedSuite {
    @Test("a subscription's, one without a transaction, implausible ids, consent, a mass extension, an external purchase token")
    func agree() async throws {
        let event = NotificationMinter.SubscriptionEvent.sample(seed: 8)
        // A notification about an app rather than a transaction (its data without nested JWSs).
        var withoutTransaction = minter.payload(event)
        var data = try #require(withoutTransaction["data"]?.objectValue)
        data["signedTransactionInfo"] = nil
        data["signedRenewalInfo"] = nil
        withoutTransaction["data"] = .object(data)
        var oddId = event
        oddId.originalTransactionId = "12\n\u{1b}[31m34"
        var longId = event
        longId.originalTransactionId = String(repeating: "7", count: 129)
        let token = minter.chain.sign(JSONObject([
            "notificationType": .string("EXTERNAL_PURCHASE_TOKEN"), "subtype": .string("UNREPORTED"), "notificationUUID": .string("u-3"),
            "signedDate": .number(JSONNumber(Int64(1_780_000_000_000))),
            "externalPurchaseToken": .object(JSONObject([
                "externalPurchaseId": .string("ext-42"), "bundleId": .string(minter.bundleId), "appAppleId": .number(JSONNumber(minter.appAppleId)),
            ])),
        ]))
        let cases: [(payload: String, key: String)] = [
            (minter.signedNotification(event), event.originalTransactionId),
            (minter.chain.sign(withoutTransaction), event.notificationUUID),
            (minter.signedNotification(oddId), event.notificationUUID),
            (minter.signedNotification(longId), event.notificationUUID),
            (minter.signedRescindConsent(notificationUUID: "u-1", signedDate: 1_780_000_000_000, appTransactionId: "704100000001"), "704100000001"),
            (minter.signedRenewalExtensionSummary(
                notificationUUID: "u-2", signedDate: 1_780_000_000_000, requestIdentifier: "mass-1", productId: "p", storefronts: [], succeeded: 1, failed: 0), "mass-1"),
            (token, "ext-42"),
        ]
        for (payload, key) in cases {
            let verified = try await verifier.verifyNotification(payload)
            #expect(verified.routingKey == key)
            #expect(UnverifiedPeek.partitionKey(ofNotification: payload) == key)
        }
    }

    @Test("only 1 to 128 bytes of printable ASCII is a key")
    func plausible() {
        #expect(RoutingKey.isPlausible("2000000123456789") && RoutingKey.isPlausible(String(repeating: "a", count: 128)))
        for implausible in ["", " 1", "1\n", String(repeating: "a", count: 129), "ü"] { #expect(!RoutingKey.isPlausible(implausible), "\(implausible)") }
    }
}
