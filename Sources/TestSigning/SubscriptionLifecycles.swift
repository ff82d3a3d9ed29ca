
/// Realistic streams of subscription notifications for end-to-end tests, benchmarks and the demo: each
/// subscription lives through a purchase, renewals and one of the common endings (voluntary expiry, billing
/// grace period and recovery, refund, pending downgrade, plain renewal), in signedDate order.
extension NotificationMinter {
    /// The events of `subscriptions` subscriptions, interleaved round-robin (as they would arrive), each
    /// subscription's in signedDate order. Deterministic for a given `firstSubscription`.
    public static func lifecycleEvents(subscriptions: Int, firstSubscription: Int = 0, start: Int64 = 1_780_000_000_000) -> [SubscriptionEvent] {
        let month: Int64 = 30 * 24 * 3600 * 1000
        var perSubscription: [[SubscriptionEvent]] = []
        for index in firstSubscription..<(firstSubscription + subscriptions) {
            let originalTransactionId = String(3_000_000_000_000_000 + index)
            let t0 = start + Int64(index % 10_000) * 1_000
            var events: [SubscriptionEvent] = []
            func event(_ step: Int, _ type: String, _ subtype: String?, at signedDate: Int64, periodStart: Int64, _ adjust: (inout SubscriptionEvent) -> Void = { _ in }) {
                var e = SubscriptionEvent.sample(seed: index, signedDate: signedDate, type: type, subtype: subtype)
                e.notificationUUID = deterministicUUID(50_000_000 + index * 16 + step)
                e.originalTransactionId = originalTransactionId
                e.transactionId = String(3_100_000_000_000_000 + index * 16 + step)
                e.purchaseDate = periodStart
                e.expiresDate = periodStart + month
                e.appAccountToken = deterministicUUID(90_000_000 + index)
                adjust(&e)
                events.append(e)
            }
            event(0, "SUBSCRIBED", "INITIAL_BUY", at: t0, periodStart: t0)
            event(1, "DID_RENEW", nil, at: t0 + month, periodStart: t0 + month)
            let last = t0 + month
            switch index % 5 {
            case 0:
                event(2, "DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: last + 86_400_000, periodStart: last) { $0.autoRenewStatus = 0 }
                event(3, "EXPIRED", "VOLUNTARY", at: last + month + 1_000, periodStart: last) {
                    $0.autoRenewStatus = 0
                    $0.status = 2
                }
            case 1:
                event(2, "DID_FAIL_TO_RENEW", "GRACE_PERIOD", at: last + month + 1_000, periodStart: last) {
                    $0.isInBillingRetryPeriod = true
                    $0.gracePeriodExpiresDate = last + month + 16 * 86_400_000
                    $0.status = 4
                }
                event(3, "DID_RENEW", "BILLING_RECOVERY", at: last + month + 3 * 86_400_000, periodStart: last + month + 3 * 86_400_000)
            case 2:
                event(2, "REFUND", nil, at: last + 10 * 86_400_000, periodStart: last) {
                    $0.revocationDate = last + 10 * 86_400_000
                    $0.revocationReason = 0
                    $0.status = 5
                    $0.transactionId = String(3_100_000_000_000_000 + index * 16 + 1)  // the renewal's transaction, refunded
                }
            case 3:
                event(2, "DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", at: last + 5 * 86_400_000, periodStart: last) {
                    $0.autoRenewProductId = "com.example.pipeline.basic.monthly"
                }
            default:
                event(2, "DID_RENEW", nil, at: last + month, periodStart: last + month)
            }
            perSubscription.append(events)
        }
        var interleaved: [SubscriptionEvent] = []
        for step in 0..<4 {
            for events in perSubscription where step < events.count { interleaved.append(events[step]) }
        }
        return interleaved
    }
}
