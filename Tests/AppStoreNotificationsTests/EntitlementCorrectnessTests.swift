import AppStoreNotifications
import TestSupport
import Testing

/// The cases where a wrong decision denies a paying customer or keeps a refunded one (older transactions, equal
/// signedDates, grace without a date, revocation columns, migrations, leeway), and a property test: any delivery
/// order of a subscription's notifications ends in the row of the in-order delivery. Every notification is
/// minted and really verified.
@Suite("Entitlement correctness")
struct EntitlementCorrectnessTests: MintedSuite {

    static func at(_ days: Int64, plus milliseconds: Int64 = 0) -> Timestamp { Timestamp(millisecondsSince1970: start + days * day + milliseconds) }

    /// A notification of subscription 77 signed on `day`, carrying transaction `period` (1: days 0–30, 2: 30–60, 3: 60–90).
    func event(_ type: String, _ subtype: String? = nil, day: Int64, period: Int64, uuid: Int? = nil, configure: (inout NotificationMinter.SubscriptionEvent) -> Void = { _ in }) -> NotificationMinter.SubscriptionEvent {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 77 * 4, signedDate: Self.start + day * Self.day, type: type, subtype: subtype)
        event.notificationUUID = deterministicUUID(uuid ?? Int(day) * 1_000 + type.count * 10 + Int(period))
        event.transactionId = String(4_000_000 + period)
        event.purchaseDate = Self.start + (period - 1) * 30 * Self.day
        event.expiresDate = Self.start + period * 30 * Self.day
        configure(&event)
        return event
    }

    func verify(_ event: NotificationMinter.SubscriptionEvent) async throws -> VerifiedNotification {
        try await verifier.verifyNotification(minter.signedNotification(event))
    }

    /// Applies events in order, as the store does (stale ones change nothing).
    func run(_ events: [NotificationMinter.SubscriptionEvent], from initial: EntitlementState? = nil) async throws -> EntitlementState? {
        var state = initial
        for event in events {
            if case .updated(let next) = EntitlementTransition.apply(try await verify(event), to: state) { state = next }
        }
        return state
    }

    func refundOfT1(_ type: String = "REFUND", day: Int64 = 40) -> NotificationMinter.SubscriptionEvent {
        event(type, day: day, period: 1) {
            $0.status = 1
            $0.renewalDate = Self.start + 60 * Self.day  // the current period (T2) ends on day 60
            if type == "REFUND" {
                $0.revocationDate = Self.start + day * Self.day
                $0.revocationReason = 0
            }
        }
    }

    // MARK: - 1. An older transaction never rolls the period back

    @Test("REFUND of an older renewal while the current period is paid: access and period kept")
    func refundOfOlderRenewal() async throws {
        let state = try #require(try await run([
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1), event("DID_RENEW", day: 30, period: 2), refundOfT1(),
        ]))
        #expect(state.status == .active && state.isActive(at: Self.at(41)), "\(state)")
        #expect(state.expiresAt == Self.at(60) && state.periodTransactionId == "4000002")
        #expect(state.revocationDate == nil && state.revocationReason == nil && state.revocationType == nil, "the refund is T1's, not the period's")
        #expect(state.lastNotificationType == "REFUND")
    }

    @Test("REFUND_REVERSED of an older renewal: period kept")
    func refundReversedOfOlderRenewal() async throws {
        let state = try #require(try await run([
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1), event("DID_RENEW", day: 30, period: 2), refundOfT1("REFUND_REVERSED", day: 45),
        ]))
        #expect(state.status == .active && state.isActive(at: Self.at(50)) && state.expiresAt == Self.at(60))
    }

    @Test("an older renewal's REFUND as the first notification seen: the renewal date stands in for the period")
    func refundOfOlderRenewalFirstSeen() async throws {
        let state = try #require(try await run([refundOfT1()]))
        #expect(state.status == .active && state.isActive(at: Self.at(41)) && state.expiresAt == Self.at(60), "\(state)")
        #expect(state.revocationDate == nil)
        // The renewal that arrives later (older signedDate) is stale; a newer one takes the period.
        let renewed = try #require(try await run([event("DID_RENEW", day: 60, period: 3)], from: state))
        #expect(renewed.expiresAt == Self.at(90) && renewed.periodTransactionId == "4000003")
    }

    @Test("the refund of the period's own transaction revokes, with reason, type and percentage")
    func refundOfCurrentPeriod() async throws {
        let state = try #require(try await run([
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1),
            event("REFUND", day: 10, period: 1) {
                $0.status = 5
                $0.revocationDate = Self.start + 10 * Self.day
                $0.revocationReason = 1
                $0.revocationType = "REFUND_PRORATED"
                $0.revocationPercentage = 33_333
            },
        ]))
        #expect(state.status == .refunded && !state.isActive(at: Self.at(11)))
        #expect(state.revocationDate == Self.at(10) && state.revocationReason == 1 && state.revocationType == "REFUND_PRORATED" && state.revocationPercentage == 33_333)
        let reversed = try #require(try await run([event("REFUND_REVERSED", day: 12, period: 1)], from: state))
        #expect(reversed.status == .active && reversed.revocationDate == nil && reversed.revocationPercentage == nil && reversed.isActive(at: Self.at(13)))
    }

    @Test("upgrade takes effect now; a later refund of the upgraded-from transaction changes nothing")
    func upgradeThenRefundOfUpgradedTransaction() async throws {
        let upgraded = try #require(try await run([
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1),
            event("DID_CHANGE_RENEWAL_PREF", "UPGRADE", day: 10, period: 1) {
                $0.transactionId = "4000010"
                $0.productId = "com.example.pipeline.premium.monthly"
                $0.purchaseDate = Self.start + 10 * Self.day
                $0.expiresDate = Self.start + 40 * Self.day
            },
        ]))
        #expect(upgraded.productId == "com.example.pipeline.premium.monthly" && upgraded.expiresAt == Self.at(40) && upgraded.status == .active)
        let state = try #require(try await run([
            event("REFUND", day: 15, period: 1) {
                $0.isUpgraded = true
                $0.status = 1
                $0.renewalDate = Self.start + 40 * Self.day
                $0.revocationDate = Self.start + 15 * Self.day
            },
        ], from: upgraded))
        #expect(state.productId == "com.example.pipeline.premium.monthly" && state.expiresAt == Self.at(40) && state.status == .active)
        #expect(state.revocationDate == nil && state.isActive(at: Self.at(20)))
    }

    @Test("a crossgrade at renewal: pending product, then the renewal switches it")
    func crossgrade() async throws {
        let state = try #require(try await run([
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1),
            event("DID_CHANGE_RENEWAL_PREF", "DOWNGRADE", day: 5, period: 1) { $0.autoRenewProductId = "com.example.pipeline.other.monthly" },
            event("DID_RENEW", day: 30, period: 2) { $0.productId = "com.example.pipeline.other.monthly" },
        ]))
        #expect(state.productId == "com.example.pipeline.other.monthly" && state.autoRenewProductId == "com.example.pipeline.other.monthly")
    }

    // MARK: - 2. Equal signedDates

    @Test("REFUND and AUTO_RENEW_DISABLED with the same signedDate: refunded in either order", arguments: [false, true])
    func equalSignedDates(reversed: Bool) async throws {
        let subscribed = event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1)
        let refund = event("REFUND", day: 10, period: 1, uuid: 9_001) {
            $0.status = 5
            $0.revocationDate = Self.start + 10 * Self.day
            $0.revocationReason = 0
        }
        let disabled = event("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", day: 10, period: 1, uuid: 9_002) { $0.autoRenewStatus = 0 }
        let state = try #require(try await run([subscribed] + (reversed ? [disabled, refund] : [refund, disabled])))
        #expect(state.status == .refunded && !state.isActive(at: Self.at(11)), "\(state.status) after \(state.lastNotificationType)")
        #expect(state.revocationDate == Self.at(10))
        // The second of the pair is never "stale because equal": it is ordered.
        let first = try #require(try await run([subscribed, disabled]))
        guard case .updated = EntitlementTransition.apply(try await verify(refund), to: first) else {
            Issue.record("a REFUND with the same signedDate as the row was dropped")
            return
        }
    }

    @Test("the same notification again is stale")
    func sameNotificationAgain() async throws {
        let renewed = event("DID_RENEW", day: 30, period: 2)
        let state = try #require(try await run([renewed]))
        #expect(EntitlementTransition.apply(try await verify(renewed), to: state) == .stale)
    }

    // MARK: - 3. Grace period without a date

    @Test("grace period (status 4) with no renewal info: access granted, bounded by Apple's longest grace period")
    func graceWithoutDate() async throws {
        let state = try #require(try await run([
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1),
            event("DID_FAIL_TO_RENEW", "GRACE_PERIOD", day: 30, period: 1) {
                $0.status = 4
                $0.includesRenewalInfo = false
            },
        ]))
        #expect(state.status == .gracePeriod && state.gracePeriodExpiresAt == nil)
        #expect(state.isActive(at: Self.at(33)), "Apple grants access in the grace period")
        #expect(!state.isActive(at: Self.at(30 + 29)), "but not past the longest grace period Apple has")
        #expect(state.billingIssueSince == Self.at(30))
    }

    // MARK: - 4. Revocation columns agree with the status

    @Test("a late REFUND after a newer status-5 notification: refunded, with the revocation columns")
    func lateRefundAfterNewerRevokedStatus() async throws {
        let revokedTransaction: (inout NotificationMinter.SubscriptionEvent) -> Void = {
            $0.status = 5
            $0.revocationDate = Self.start + 10 * Self.day
            $0.revocationReason = 1
        }
        let newer = event("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", day: 11, period: 1) {
            revokedTransaction(&$0)
            $0.autoRenewStatus = 0
        }
        let refund = event("REFUND", day: 10, period: 1, configure: revokedTransaction)
        let state = try #require(try await run([event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1), newer, refund]))
        #expect(state.status == .refunded && state.revocationDate == Self.at(10) && state.revocationReason == 1 && state.revocationType == "REFUND_FULL")
    }

    @Test("family sharing revoked: revoked with FAMILY_REVOKE; the member row has no app account token link but an appTransactionId")
    func familyRevoke() async throws {
        let state = try #require(try await run([
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1) { $0.inAppOwnershipType = "FAMILY_SHARED" },
            event("REVOKE", day: 5, period: 1) {
                $0.inAppOwnershipType = "FAMILY_SHARED"
                $0.status = 5
                $0.revocationDate = Self.start + 5 * Self.day
                $0.revocationType = "FAMILY_REVOKE"
            },
        ]))
        #expect(state.status == .revoked && state.revocationType == "FAMILY_REVOKE" && state.ownershipType == "FAMILY_SHARED")
        #expect(state.appTransactionId != nil)
    }

    // MARK: - 5. Contracts

    @Test("MIGRATION: the subscription continued under a new originalTransactionId supersedes the previous row")
    func migrationSupersedes() async throws {
        let previous = try #require(try await run([event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1)]))
        var migratedEvent = event("MIGRATION", day: 12, period: 1) { $0.previousOriginalTransactionId = previous.originalTransactionId }
        migratedEvent.originalTransactionId = "5000000000000001"
        let successor = try #require(try await run([migratedEvent]))
        #expect(successor.previousOriginalTransactionId == previous.originalTransactionId)
        let superseded = try #require(EntitlementTransition.supersede(previous, originalTransactionId: previous.originalTransactionId, by: successor))
        #expect(superseded.status == .migrated && superseded.supersededBy == "5000000000000001" && !superseded.isActive(at: Self.at(13)))
        // An older notification of the previous subscription arriving later is stale.
        #expect(EntitlementTransition.apply(try await verify(event("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", day: 11, period: 1)), to: superseded) == .stale)
        // Created even when the previous row was never seen.
        #expect(EntitlementTransition.supersede(nil, originalTransactionId: "x", by: successor)?.status == .migrated)
    }

    @Test("billing issue since the period's end when the first status seen is billing retry or grace", arguments: [Int32(3), 4])
    func billingIssueFirstSeen(status: Int32) async throws {
        let state = try #require(try await run([
            event(status == 4 ? "DID_FAIL_TO_RENEW" : "DID_CHANGE_RENEWAL_STATUS", status == 4 ? "GRACE_PERIOD" : "AUTO_RENEW_DISABLED", day: 31, period: 1) {
                $0.status = status
                if status == 4 { $0.gracePeriodExpiresDate = Self.start + 46 * Self.day }
            },
        ]))
        #expect(state.billingIssueSince == Self.at(30), "\(state)")
    }

    @Test("a first-seen mid-life notification builds the whole row")
    func firstSeenMidLife() async throws {
        let state = try #require(try await run([event("DID_RENEW", day: 60, period: 3)]))
        #expect(state.status == .active && state.expiresAt == Self.at(90) && state.productId != nil && state.price != nil && state.appAccountToken != nil)
    }

    @Test("is_active for every status, and the expiry leeway")
    func isActiveEveryStatus() throws {
        var state = EntitlementState(environment: "Production", bundleId: "b", originalTransactionId: "1", status: .active, lastNotificationType: "DID_RENEW", lastSignedDate: Self.at(0))
        state.expiresAt = Self.at(30)
        for status in EntitlementState.Status.allCases {
            state.status = status
            #expect(state.isActive(at: Self.at(10)) == (status == .active || status == .gracePeriod), "\(status)")
        }
        state.status = .active
        // A renewal notification a minute late denies nothing under the default leeway (2 minutes); none without.
        #expect(state.isActive(at: Self.at(30, plus: 60_000)))
        #expect(!state.isActive(at: Self.at(30, plus: 60_000), leewayMilliseconds: 0))
        #expect(!state.isActive(at: Self.at(30, plus: 3 * 60_000)))
    }

    // MARK: - 6. Any delivery order ends in the same row

    @Test("any permutation of a subscription's notifications, with duplicates, ends in the in-order row")
    func permutations() async throws {
        let stream = [
            event("SUBSCRIBED", "INITIAL_BUY", day: 0, period: 1),
            event("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", day: 3, period: 1) { $0.autoRenewStatus = 0 },
            event("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_ENABLED", day: 3, period: 1, uuid: 3_333),  // same signedDate
            event("DID_FAIL_TO_RENEW", "GRACE_PERIOD", day: 30, period: 1) {
                $0.status = 4
                $0.gracePeriodExpiresDate = Self.start + 36 * Self.day
            },
            event("DID_RENEW", "BILLING_RECOVERY", day: 33, period: 2) { $0.expiresDate = Self.start + 63 * Self.day },
            refundOfT1(day: 45),
            event("REFUND", day: 50, period: 2) {
                $0.status = 5
                $0.expiresDate = Self.start + 63 * Self.day
                $0.revocationDate = Self.start + 50 * Self.day
                $0.revocationReason = 1
            },
            event("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED", day: 50, period: 2) {
                $0.status = 5
                $0.expiresDate = Self.start + 63 * Self.day
                $0.revocationDate = Self.start + 50 * Self.day
                $0.revocationReason = 1
                $0.autoRenewStatus = 0
            },
        ]
        let verified = try await withThrowingTaskGroup(of: (Int, VerifiedNotification).self) { group in
            for (index, event) in stream.enumerated() { group.addTask { (index, try await self.verify(event)) } }
            var result = [VerifiedNotification?](repeating: nil, count: stream.count)
            for try await (index, notification) in group { result[index] = notification }
            return result.compactMap { $0 }
        }
        func deliver(_ order: [Int]) -> EntitlementState? {
            var state: EntitlementState?
            for index in order {
                if case .updated(let next) = EntitlementTransition.apply(verified[index], to: state) { state = next }
            }
            return state
        }
        let inOrder = try #require(deliver(Array(verified.indices)))
        #expect(inOrder.status == .refunded && inOrder.revocationDate == Self.at(50))
        var generator = SplitMix64(seed: 20_261_123)
        for _ in 0..<300 {
            var order = Array(verified.indices)
            order += order.filter { _ in generator.next() % 3 == 0 }  // duplicates
            order.shuffle(using: &generator)
            let state = deliver(order)
            #expect(state == inOrder, "delivery order \(order)")
        }
    }
}
