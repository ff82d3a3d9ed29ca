/// What a notification is about, as one string: the key its Kafka record is produced under (so one subscription's
/// notifications share a partition and keep their order) and the key a distributed database would shard its rows by
/// (docs/scale.md). Ingest reads it from the unverified payload (`UnverifiedPeek.partitionKey`), the worker from the
/// verified one (`VerifiedNotification.routingKey`); both apply this one rule, so they agree on every payload that
/// verifies.
public enum RoutingKey {
    /// The first plausible candidate, in this order: the nested transaction's `originalTransactionId`; without a
    /// transaction, the app transaction's `appTransactionId` (RESCIND_CONSENT), the mass extension's
    /// `requestIdentifier` (a RENEWAL_EXTENSION SUMMARY), the external purchase token's `externalPurchaseId`; else
    /// the `notificationUUID`. Candidates are read lazily: ingest decodes a nested JWS only when it needs it.
    public static func first(
        originalTransactionId: () -> String?, appTransactionId: () -> String?, requestIdentifier: () -> String?,
        externalPurchaseId: () -> String?, notificationUUID: () -> String?
    ) -> String? {
        func plausible(_ candidate: String?) -> String? { candidate.flatMap { isPlausible($0) ? $0 : nil } }
        return plausible(originalTransactionId()) ?? plausible(appTransactionId()) ?? plausible(requestIdentifier())
            ?? plausible(externalPurchaseId()) ?? plausible(notificationUUID())
    }

    /// 1 to 128 bytes of printable ASCII (Apple's ids are digits, its UUIDs 36 characters): attacker text of any
    /// other shape routes as no key.
    public static func isPlausible(_ text: String) -> Bool {
        (1...128).contains(text.utf8.count) && text.utf8.allSatisfy { (0x21...0x7e).contains($0) }
    }
}

extension VerifiedNotification {
    /// The routing key of this notification (`RoutingKey`), from its verified content.
    public var routingKey: String? {
        RoutingKey.first(
            originalTransactionId: { transactionInfo?.model.originalTransactionId },
            appTransactionId: { appTransactionInfo?.model.appTransactionId },
            requestIdentifier: { payload.summary?.requestIdentifier },
            externalPurchaseId: { payload.externalPurchaseToken?.externalPurchaseId },
            notificationUUID: { payload.notificationUUID })
    }
}
