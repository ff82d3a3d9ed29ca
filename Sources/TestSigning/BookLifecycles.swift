/// The lifecycles of a synthetic book (docs/scale.md, the seed tool): what a subscription app's book holds at
/// scale, deterministic by subscription index, so a seeded book and the same lifecycles minted and sent through the
/// pipeline can be compared row by row.
///
/// Subscription `index` is: yearly one in four (else monthly); in Germany, in euros, one in three (else the United
/// States, in dollars); started with a week's free trial one in three; family-shared one in twenty (no app account
/// token, as Apple leaves it out); 1–12 paid monthly periods or 1–2 yearly ones; and ends, by `index % 7`, in a
/// voluntary expiry, a billing problem recovered within its grace period, a billing retry that expired, a refund of
/// its last period, a pending downgrade, or not at all (two in seven still renewing). Starts are spread over
/// `spreadDays` days from `start`, and over the seconds of a day.
///
/// Every identifier of subscription `index` holds its token `bookToken(index)` (`b0` and the index in ten digits;
/// the letter keeps it from matching inside a number or a date) and nothing else varies with the index but the
/// shape, taken from `index % templates`: so the seed tool stores `templates` lifecycles through the worker's path
/// and copies them in SQL, replacing the token, and the copies are exactly the lifecycles of their own indexes.
extension NotificationMinter {
    public static let bookMonthlyProduct = "com.example.pipeline.pro.monthly"
    public static let bookYearlyProduct = "com.example.pipeline.pro.yearly"
    public static let bookDowngradeProduct = "com.example.pipeline.basic.monthly"

    /// What every identifier of subscription `index` holds, and only its identifiers.
    public static func bookToken(_ index: Int) -> String {
        let digits = String(index)
        return "b0" + String(repeating: "0", count: max(0, 10 - digits.count)) + digits
    }

    static func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// The original transaction id of subscription `index`.
    public static func bookOriginalTransactionId(_ index: Int) -> String { bookToken(index) + "0000" }

    /// The events of subscription `index`, in signedDate order: the shape of `index % templates` (every index's
    /// own when `templates` is nil), the identifiers of `index`.
    public static func bookLifecycle(index: Int, templates: Int? = nil, start: Int64 = 1_735_732_800_000, spreadDays: Int = 730) -> [SubscriptionEvent] {
        let token = bookToken(index)
        let index = templates.map { index % $0 } ?? index
        let day: Int64 = 86_400_000
        let yearly = index % 4 == 0
        let period = (yearly ? 365 : 30) * day
        let paidPeriods = yearly ? 1 + index % 2 : 1 + (index * 7) % 12
        let trial = index % 3 == 1
        let germany = index % 3 == 0
        let t0 = start + Int64(index % max(spreadDays, 1)) * day + Int64(index % 86_400) * 1_000

        var base = SubscriptionEvent(
            notificationType: "SUBSCRIBED", subtype: "INITIAL_BUY", notificationUUID: "", signedDate: t0,
            originalTransactionId: token + "0000", transactionId: "", purchaseDate: t0, expiresDate: t0 + period,
            appAccountToken: index % 20 == 0 ? "" : "70c00000-0000-4000-8000-" + token)
        base.productId = yearly ? bookYearlyProduct : bookMonthlyProduct
        base.storefront = germany ? "DEU" : "USA"
        base.currency = germany ? "EUR" : "USD"
        base.price = yearly ? (germany ? 44_990 : 49_990) : (germany ? 5_490 : 5_990)
        base.inAppOwnershipType = index % 20 == 0 ? "FAMILY_SHARED" : "PURCHASED"

        var events: [SubscriptionEvent] = []
        var periodIndex = 0
        /// One notification about the period `periodIndex` (its own transaction), signed at `signedDate`.
        func event(_ type: String, _ subtype: String?, at signedDate: Int64, periodStart: Int64, length: Int64, _ adjust: (inout SubscriptionEvent) -> Void = { _ in }) {
            var e = base
            e.notificationType = type
            e.subtype = subtype
            e.notificationUUID = "5eed" + pad(events.count, 4) + "-0000-4000-8000-" + token
            e.signedDate = signedDate
            e.transactionId = token + "1" + pad(periodIndex, 3)
            e.webOrderLineItemId = token + "2" + pad(periodIndex, 3)
            e.purchaseDate = periodStart
            e.expiresDate = periodStart + length
            adjust(&e)
            events.append(e)
        }

        var periodStart = t0
        if trial {
            event("SUBSCRIBED", "INITIAL_BUY", at: t0, periodStart: t0, length: 7 * day) {
                $0.offerType = 1
                $0.offerDiscountType = "FREE_TRIAL"
                $0.offerPeriod = "P1W"
                $0.price = 0
            }
            periodStart = t0 + 7 * day
            periodIndex += 1
        }
        for paid in 0..<paidPeriods {
            if paid == 0 && !trial {
                event("SUBSCRIBED", "INITIAL_BUY", at: periodStart, periodStart: periodStart, length: period)
            } else {
                event("DID_RENEW", nil, at: periodStart, periodStart: periodStart, length: period)
            }
            periodIndex += 1
            periodStart += period
        }
        // The last period: [lastStart, periodStart).
        periodIndex -= 1
        let lastStart = periodStart - period
        switch index % 7 {
        case 0:
            event("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", at: lastStart + day, periodStart: lastStart, length: period) { $0.autoRenewStatus = 0 }
            event("EXPIRED", "VOLUNTARY", at: periodStart + 1_000, periodStart: lastStart, length: period) {
                $0.autoRenewStatus = 0
                $0.status = 2
            }
        case 1:
            event("DID_FAIL_TO_RENEW", "GRACE_PERIOD", at: periodStart + 1_000, periodStart: lastStart, length: period) {
                $0.isInBillingRetryPeriod = true
                $0.gracePeriodExpiresDate = periodStart + 16 * day
                $0.status = 4
            }
            periodIndex += 1
            event("DID_RENEW", "BILLING_RECOVERY", at: periodStart + 3 * day, periodStart: periodStart + 3 * day, length: period)
        case 2:
            event("DID_FAIL_TO_RENEW", nil, at: periodStart + 1_000, periodStart: lastStart, length: period) {
                $0.isInBillingRetryPeriod = true
                $0.status = 3
            }
            event("EXPIRED", "BILLING_RETRY", at: periodStart + 60 * day, periodStart: lastStart, length: period) {
                $0.autoRenewStatus = 0
                $0.status = 2
            }
        case 3:
            event("REFUND", nil, at: lastStart + 10 * day, periodStart: lastStart, length: period) {
                $0.revocationDate = lastStart + 10 * day
                $0.revocationReason = 0
                $0.status = 5
            }
        case 4:
            event("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", at: lastStart + 5 * day, periodStart: lastStart, length: period) {
                $0.autoRenewProductId = bookDowngradeProduct
            }
        default:
            break
        }
        return events
    }

    /// The events of subscriptions `first..<first + count`, merged in signedDate order (as they would arrive).
    public static func bookEvents(
        subscriptions count: Int, first: Int = 0, templates: Int? = nil, start: Int64 = 1_735_732_800_000, spreadDays: Int = 730
    ) -> [SubscriptionEvent] {
        var events: [SubscriptionEvent] = []
        for index in first..<(first + count) { events += bookLifecycle(index: index, templates: templates, start: start, spreadDays: spreadDays) }
        // Stable: a subscription's events keep their order where two share a signedDate.
        return events.enumerated().sorted { ($0.element.signedDate, $0.offset) < ($1.element.signedDate, $1.offset) }.map(\.element)
    }
}
