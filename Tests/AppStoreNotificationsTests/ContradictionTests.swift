import AppStoreNotifications
import TestSupport
import Testing

/// Rows that contradict Apple's last word: marked with a reason, granted meanwhile only when Apple says active
/// and only until the backstop, denied when Apple says expired or revoked, and cleared by a notification (or a
/// status snapshot) that resolves them.
@Suite("Contradicted entitlements")
struct ContradictionTests: MintedSuite {

    static func at(_ days: Int64) -> Timestamp { Timestamp(millisecondsSince1970: start + days * day) }

    /// Subscription 55's notification signed on `day`, carrying transaction `period` (1: days 0–30, 2: 30–60).
    func apply(
        _ type: String, day: Int64, period: Int64, status: Int32, to state: EntitlementState?, configure: (inout NotificationMinter.SubscriptionEvent) -> Void = { _ in }
    ) async throws -> EntitlementState {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 55 * 4, signedDate: Self.start + day * Self.day, type: type)
        event.notificationUUID = deterministicUUID(Int(day) * 100 + Int(period))
        event.transactionId = String(5_000_000 + period)
        event.purchaseDate = Self.start + (period - 1) * 30 * Self.day
        event.expiresDate = Self.start + period * 30 * Self.day
        event.status = status
        configure(&event)
        guard case .updated(let next) = EntitlementTransition.apply(try await verifier.verifyNotification(minter.signedNotification(event)), to: state) else {
            throw Unapplied()
        }
        return next
    }

    struct Unapplied: Error {}

    @Test("the first notification is the REFUND of T1 (days 0–30, refunded day 40) with Apple saying active: marked, granted until the backstop, never beyond")
    func refundFirstWithAppleActive() async throws {
        let state = try await apply("REFUND", day: 40, period: 1, status: 1, to: nil) {
            $0.revocationDate = Self.start + 40 * Self.day
            $0.revocationReason = 0
        }
        #expect(state.status == .active && state.expiresAt == Self.at(30))
        #expect(state.contradiction == EntitlementTransition.Contradiction.appleActiveDatesPassed.rawValue)
        #expect(state.contradictedSince == Self.at(40))
        #expect(state.contradictionGrantsUntil == Self.at(47), "the backstop: the contradiction's signedDate + 7 days")
        #expect(state.isActive(at: Self.at(40)) && state.isActive(at: Self.at(46)), "Apple said active: granted meanwhile")
        #expect(!state.isActive(at: Self.at(47)) && !state.isActive(at: Self.at(60)), "never beyond the backstop")

        // Apple's status snapshot (or the renewal notification) shows the newer period: the mark is cleared.
        let healed = try await apply(StatusSnapshotLike.type, day: 41, period: 2, status: 1, to: state)
        #expect(healed.contradiction == nil && healed.contradictedSince == nil && healed.contradictionGrantsUntil == nil)
        #expect(healed.expiresAt == Self.at(60) && healed.isActive(at: Self.at(50)))
    }

    @Test("Apple says expired while our period is open: denied and marked; a later consistent notification clears it")
    func appleInactiveWhilePeriodOpen() async throws {
        let subscribed = try await apply("SUBSCRIBED", day: 0, period: 1, status: 1, to: nil)
        #expect(subscribed.contradiction == nil && subscribed.isActive(at: Self.at(10)))
        let expired = try await apply("EXPIRED", day: 10, period: 1, status: 2, to: subscribed) { $0.autoRenewStatus = 0 }
        #expect(expired.status == .expired && !expired.isActive(at: Self.at(10)), "Apple's word denies")
        #expect(expired.contradiction == EntitlementTransition.Contradiction.appleInactivePeriodOpen.rawValue && expired.contradictionGrantsUntil == nil)
        let renewed = try await apply("DID_RENEW", day: 30, period: 2, status: 1, to: expired)
        #expect(renewed.contradiction == nil && renewed.isActive(at: Self.at(31)))
    }

    @Test("a first-seen subscription whose only notification carries an older transaction is marked; the renewal date keeps access")
    func firstSeenOlderTransaction() async throws {
        let state = try await apply("REFUND", day: 40, period: 1, status: 1, to: nil) {
            $0.revocationDate = Self.start + 40 * Self.day
            $0.renewalDate = Self.start + 60 * Self.day
        }
        #expect(state.contradiction == EntitlementTransition.Contradiction.firstSeenOlderTransaction.rawValue)
        #expect(state.contradictionGrantsUntil == nil && state.isActive(at: Self.at(50)), "access from the renewal date, no grant needed")
    }

    @Test("an ordinary lifecycle is never marked")
    func ordinaryLifecycle() async throws {
        var states: [String: EntitlementState] = [:]
        for event in NotificationMinter.lifecycleEvents(subscriptions: 10) {
            let verified = try await verifier.verifyNotification(minter.signedNotification(event))
            if case .updated(let next) = EntitlementTransition.apply(verified, to: states[event.originalTransactionId]) {
                states[event.originalTransactionId] = next
                #expect(next.contradiction == nil, "\(event.notificationType) \(event.subtype ?? "")")
            }
        }
        #expect(states.count == 10)
    }

    /// A DID_RENEW stands for the pulled status snapshot here: both carry the newer period with Apple's status.
    enum StatusSnapshotLike { static let type = "DID_RENEW" }
}
