import AppStoreNotifications
import TestSupport
import Testing

/// The entitlement state machine, fed with minted notifications that went through real verification.
@Suite("Entitlement transitions")
struct EntitlementTransitionTests: MintedSuite {

    /// One event of subscription 42 at `day` days after `start`.
    func event(_ type: String, _ subtype: String? = nil, day: Int64, configure: (inout NotificationMinter.SubscriptionEvent) -> Void = { _ in }) -> NotificationMinter.SubscriptionEvent {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 42 * 4, signedDate: Self.start + day * Self.day, type: type, subtype: subtype)
        event.notificationUUID = deterministicUUID(Int(day) * 100 + type.count)
        event.purchaseDate = Self.start
        event.expiresDate = Self.start + 30 * Self.day
        configure(&event)
        return event
    }

    func apply(_ event: NotificationMinter.SubscriptionEvent, to state: EntitlementState?) async throws -> EntitlementTransition.Outcome {
        EntitlementTransition.apply(try await verifier.verifyNotification(minter.signedNotification(event)), to: state)
    }

    func updated(_ outcome: EntitlementTransition.Outcome) throws -> EntitlementState {
        guard case .updated(let state) = outcome else {
            Issue.record("expected an update, got \(outcome)")
            throw CancellationError()
        }
        return state
    }

    @Test("a subscription's life: subscribe, fail to renew into grace, recover, expire")
    func lifecycle() async throws {
        var state = try updated(try await apply(event("SUBSCRIBED", "INITIAL_BUY", day: 0), to: nil))
        #expect(state.status == .active && state.productId == "com.example.pipeline.pro.monthly")
        #expect(state.expiresAt == Timestamp(millisecondsSince1970: Self.start + 30 * Self.day))
        #expect(state.isActive(at: Timestamp(millisecondsSince1970: Self.start + Self.day)))
        #expect(!state.isActive(at: Timestamp(millisecondsSince1970: Self.start + 31 * Self.day)), "expiry backstop")

        state = try updated(try await apply(event("DID_FAIL_TO_RENEW", "GRACE_PERIOD", day: 30) {
            $0.status = 4
            $0.isInBillingRetryPeriod = true
            $0.gracePeriodExpiresDate = Self.start + 36 * Self.day
        }, to: state))
        #expect(state.status == .gracePeriod && state.billingIssueSince == Timestamp(millisecondsSince1970: Self.start + 30 * Self.day))
        #expect(state.isActive(at: Timestamp(millisecondsSince1970: Self.start + 32 * Self.day)), "grace grants access")
        #expect(!state.isActive(at: Timestamp(millisecondsSince1970: Self.start + 37 * Self.day)), "until the grace period ends")

        state = try updated(try await apply(event("DID_RENEW", "BILLING_RECOVERY", day: 33) { $0.expiresDate = Self.start + 63 * Self.day }, to: state))
        #expect(state.status == .active && state.billingIssueSince == nil && state.gracePeriodExpiresAt == nil)
        #expect(state.expiresAt == Timestamp(millisecondsSince1970: Self.start + 63 * Self.day))

        state = try updated(try await apply(event("EXPIRED", "VOLUNTARY", day: 64) {
            $0.status = 2
            $0.autoRenewStatus = 0
        }, to: state))
        #expect(state.status == .expired && state.autoRenewStatus == 0 && !state.isActive(at: Timestamp(millisecondsSince1970: Self.start + 64 * Self.day)))
        #expect(state.lastNotificationType == "EXPIRED" && state.lastNotificationSubtype == "VOLUNTARY")
    }

    @Test("older or replayed notifications never move state backwards")
    func forwardOnly() async throws {
        let renewed = try updated(try await apply(event("DID_RENEW", day: 30), to: nil))
        let expired = try updated(try await apply(event("EXPIRED", "VOLUNTARY", day: 60) { $0.status = 2 }, to: renewed))
        #expect(try await apply(event("DID_RENEW", day: 30), to: expired) == .stale, "a late renewal after a newer expiry")
        #expect(try await apply(event("EXPIRED", "VOLUNTARY", day: 60) { $0.status = 2 }, to: expired) == .stale, "the same notification again")
    }

    @Test("refund revokes with reason; a reversed refund restores access")
    func refunds() async throws {
        let active = try updated(try await apply(event("SUBSCRIBED", "INITIAL_BUY", day: 0), to: nil))
        let refunded = try updated(try await apply(event("REFUND", day: 5) {
            $0.status = 5
            $0.revocationDate = Self.start + 5 * Self.day
            $0.revocationReason = 1
        }, to: active))
        #expect(refunded.status == .refunded && refunded.revocationReason == 1 && refunded.revocationType == "REFUND_FULL")
        #expect(!refunded.isActive(at: Timestamp(millisecondsSince1970: Self.start + 6 * Self.day)))
        let reversed = try updated(try await apply(event("REFUND_REVERSED", day: 7), to: refunded))
        #expect(reversed.status == .active && reversed.revocationDate == nil)
    }

    @Test("a downgrade is pending: the renewing product changes, the current one does not")
    func downgrade() async throws {
        let active = try updated(try await apply(event("SUBSCRIBED", "INITIAL_BUY", day: 0), to: nil))
        let pending = try updated(try await apply(event("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", day: 3) { $0.autoRenewProductId = "com.example.pipeline.basic.monthly" }, to: active))
        #expect(pending.productId == "com.example.pipeline.pro.monthly" && pending.autoRenewProductId == "com.example.pipeline.basic.monthly")
        #expect(pending.status == .active)
    }

    @Test("Apple's data.status wins over the type's default, and is kept as received")
    func appleStatus() async throws {
        let state = try updated(try await apply(event("DID_RENEW", day: 30) { $0.status = 3 }, to: nil))
        #expect(state.status == .billingRetry && state.appleStatus == 3)
    }

    @Test("TEST, unknown types and one-time purchases change no subscription")
    func notApplicable() async throws {
        #expect(try await apply(event("TEST", day: 1), to: nil) == .notApplicable)
        #expect(try await apply(event("SOMETHING_NEW", day: 1), to: nil) == .notApplicable)
        #expect(try await apply(event("ONE_TIME_CHARGE", day: 1) { $0.productType = "Consumable" }, to: nil) == .notApplicable)
    }
}
