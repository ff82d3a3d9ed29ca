import AppStoreNotifications
import Foundation
import KafkaClient
import PipelineOperations
import ServiceRuntime
import PostgresNIO
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

/// Apple as the source of truth: reconcile, import and consumption answers, against real ingest, broker, worker
/// and PostgreSQL, with the fake App Store Server API holding the truth.
@Suite(
    "Reconcile, import and consumption: real services, the fake App Store Server API", .serialized,
    .requiresKafkaAndPostgres)
struct ReconcileProcessTests: ProcessSuite {
    static let app = ["--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production"]
    /// A subscription month in the minted lifecycles (milliseconds).
    static let month: Int64 = 30 * 86_400_000
    static let fast = ["APPSTORE_RATE_LIMIT_STATUSES": "1000", "APPSTORE_RATE_LIMIT_TRANSACTION_HISTORY": "1000"]

    /// What the fake Apple says of a subscription whose latest event is `event`.
    static func truth(_ event: NotificationMinter.SubscriptionEvent, minter: NotificationMinter, history: [String] = []) -> FakeAppStoreServerAPI.Subscription {
        FakeAppStoreServerAPI.Subscription(
            originalTransactionId: event.originalTransactionId, subscriptionGroupIdentifier: "21000001", status: event.status,
            signedTransactionInfo: minter.chain.sign(minter.transaction(event)), signedRenewalInfo: minter.chain.sign(minter.renewalInfo(event)), history: history)
    }

    /// The row Apple's status for `event` must produce: status, expiry, product.
    static func expectedRow(_ event: NotificationMinter.SubscriptionEvent) -> String {
        let status = switch event.status {
        case 1: "active"
        case 2: "expired"
        case 3: "billingRetry"
        case 4: "gracePeriod"
        default: event.revocationDate != nil ? "refunded" : "revoked"
        }
        return "\(event.originalTransactionId) \(status) \(event.expiresDate) \(event.productId)"
    }

    static func rows(_ scene: BackfillScene) async throws -> [String] {
        try await scene.query(
            "SELECT original_transaction_id || ' ' || status || ' ' || (extract(epoch FROM expires_at) * 1000)::bigint || ' ' || product_id FROM entitlements ORDER BY 1",
            as: String.self)
    }

    @Test("drift repair: withheld notifications; reconcile --stale makes entitlements Apple's truth; --all again changes nothing")
    func driftRepair() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL)
        let minter = scene.fixture.minter
        let events = NotificationMinter.lifecycleEvents(subscriptions: 15, firstSubscription: 5_000)
        let latest = Dictionary(grouping: events, by: \.originalTransactionId).mapValues { $0.max { $0.signedDate < $1.signedDate }! }
        let withheld = Set(latest.values.filter { Int($0.originalTransactionId.suffix(4))! % 3 == 0 }.map(\.notificationUUID))
        try await scene.startIngest()
        for event in events where !withheld.contains(event.notificationUUID) {
            #expect(await scene.deliver(minter.signedNotification(event)) == .success)
        }
        #expect(try await TestDatabase.waitForLedger(scene.database, count: events.count - withheld.count), "\(scene.fixture.logTail())")
        for event in latest.values { scene.apple.fake.setSubscription(Self.truth(event, minter: minter)) }
        let expected = latest.values.map(Self.expectedRow).sorted()
        let drifted = try await Self.rows(scene)
        #expect(drifted != expected, "the withheld notifications left rows wrong")
        // Rows whose status, expiry or product differ from Apple's (a withheld pending downgrade changes none of them).
        let wrong = Set(Set(drifted).symmetricDifference(expected).map { String($0.prefix { $0 != " " }) })

        let stale = try await scene.run(["reconcile"] + Self.app + ["--stale", "--json"], extra: Self.fast)
        #expect(stale.status == 0, "\(stale.output)\n\(scene.fixture.logTail())")
        let summary = try #require(scene.summary(stale.output), "\(stale.output)")
        guard case .array(let changed)? = summary["changed"] else { Issue.record("no changed list: \(summary.serialized)"); return }
        #expect(Set(changed.compactMap { $0.objectValue?["originalTransactionId"]?.stringValue }) == wrong, "exactly the wrong rows changed: \(summary.serialized)")
        #expect(!wrong.isEmpty && wrong.count <= withheld.count)
        #expect(try await Self.rows(scene) == expected, "entitlements equal Apple's truth")
        #expect(try await scene.query("SELECT count(*)::int FROM notifications WHERE notification_type = 'STATUS_SNAPSHOT' AND source = 'statuses'", as: Int.self).first ?? 0 > 0)

        let again = try await scene.run(["reconcile"] + Self.app + ["--all", "--json"], extra: Self.fast)
        #expect(again.status == 0, "\(again.output)")
        #expect(scene.summary(again.output)?["changed"] == .array([]), "\(again.output)")
        #expect(try await Self.rows(scene) == expected)

        // Each repaired row made one event, caused by the status snapshot; the second reconcile made none.
        var bySnapshot: [String: Int] = [:]
        let deadline = ContinuousClock.now + .seconds(30)
        repeat {
            let events = try await ReadEvent.readAll(scene.fixture, topic: scene.fixture.eventsTopic(), atLeast: 1)
            bySnapshot = Dictionary(grouping: events.filter { $0.data["cause"]?.objectValue?["kind"] == .string("statusSnapshot") }, by: \.subject).mapValues(\.count)
            if wrong.isSubset(of: bySnapshot.keys) { break }
            try await Task.sleep(for: .milliseconds(500))
        } while ContinuousClock.now < deadline
        #expect(wrong.isSubset(of: bySnapshot.keys) && bySnapshot.values.allSatisfy { $0 == 1 }, "one statusSnapshot event per repaired row: \(bySnapshot)")
        await scene.finish()
    }

    /// Three subscriptions near today (the view's `now()` decides access): A's first notification is the refund
    /// of a period that ended 10 days ago with Apple saying active (a renewal we never saw); B's Apple status says
    /// revoked while its period is open; C is ordinary. Apple's truth: A renewed until 20 days from now, B revoked.
    static func contradictedCase(_ minter: NotificationMinter) -> (events: [NotificationMinter.SubscriptionEvent], truth: [NotificationMinter.SubscriptionEvent]) {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let day: Int64 = 86_400_000
        func event(_ id: Int, _ type: String, signed: Int64, period: (Int64, Int64), status: Int32, step: Int) -> NotificationMinter.SubscriptionEvent {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: 7_700 + id, signedDate: signed, type: type)
            event.originalTransactionId = String(3_000_000_000_077_000 + id)
            event.transactionId = String(3_100_000_000_077_000 + id * 10 + step)
            event.notificationUUID = deterministicUUID(77_000_000 + id * 10 + step)
            (event.purchaseDate, event.expiresDate) = period
            event.status = status
            return event
        }
        var refund = event(0, "REFUND", signed: now - 60_000, period: (now - 40 * day, now - 10 * day), status: 1, step: 1)
        refund.revocationDate = now - 60_000
        refund.revocationReason = 0
        let renewedTruth = event(0, "DID_RENEW", signed: now - 30_000, period: (now - 10 * day, now + 20 * day), status: 1, step: 2)
        let subscribedB = event(1, "SUBSCRIBED", signed: now - 5 * day, period: (now - 5 * day, now + 25 * day), status: 1, step: 1)
        var revokedWord = event(1, "DID_CHANGE_RENEWAL_STATUS", signed: now - 60_000, period: (now - 5 * day, now + 25 * day), status: 5, step: 1)
        revokedWord.notificationUUID = deterministicUUID(77_000_000 + 10 + 5)  // the same transaction, another notification
        var revokedTruth = event(1, "REVOKE", signed: now - 30_000, period: (now - 5 * day, now + 25 * day), status: 5, step: 1)
        revokedTruth.revocationDate = now - 60_000
        revokedTruth.revocationType = "FAMILY_REVOKE"
        let ordinary = event(2, "SUBSCRIBED", signed: now - day, period: (now - day, now + 29 * day), status: 1, step: 1)
        return ([refund, subscribedB, revokedWord, ordinary], [renewedTruth, revokedTruth, ordinary])
    }

    /// A scene whose fake Apple holds the truth of `contradictedCase` and has sent its notifications, all stored.
    func contradictedScene(workerHeals: Bool) async throws -> (BackfillScene, [NotificationMinter.SubscriptionEvent], [NotificationMinter.SubscriptionEvent]) {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, workerHeals: workerHeals)
        let minter = scene.fixture.minter
        let (events, truth) = Self.contradictedCase(minter)
        for event in truth { scene.apple.fake.setSubscription(Self.truth(event, minter: minter)) }
        try await scene.startIngest()
        for event in events { #expect(await scene.deliver(minter.signedNotification(event)) == .success) }
        #expect(try await TestDatabase.waitForLedger(scene.database, count: events.count), "\(scene.fixture.logTail())")
        return (scene, events, truth)
    }

    static func contradictionRows(_ scene: BackfillScene) async throws -> [String] {
        try await scene.query(
            """
            SELECT original_transaction_id || ' ' || status || ' ' || is_active || ' ' || coalesce(contradiction, '-') FROM entitlements_now
            ORDER BY original_transaction_id
            """, as: String.self)
    }

    @Test("self-healing: a row Apple contradicts is marked, granted until the backstop (or denied), pulled by the worker without an operator, and ends as Apple says; no pull for a row that is not contradicted")
    func selfHealing() async throws {
        let (scene, events, truth) = try await contradictedScene(workerHeals: true)
        let (a, b, c) = (events[0].originalTransactionId, events[1].originalTransactionId, events[3].originalTransactionId)

        // Healed without an operator: A active until its renewed period's end, B revoked, neither marked.
        var rows: [String] = []
        let deadline = ContinuousClock.now + .seconds(60)
        let healed = ["\(a) active true -", "\(b) revoked false -", "\(c) active true -"]
        repeat {
            rows = try await Self.contradictionRows(scene)
            if rows == healed { break }
            try await Task.sleep(for: .milliseconds(200))
        } while ContinuousClock.now < deadline
        #expect(rows == healed, "\(scene.fixture.logTail())")
        #expect(try await scene.query("SELECT (extract(epoch FROM expires_at) * 1000)::bigint FROM entitlements WHERE original_transaction_id = '\(a)'", as: Int64.self) == [truth[0].expiresDate])
        let asked = scene.apple.fake.requests.map(\.path)
        #expect(asked.contains { $0.hasSuffix("/" + a) } && asked.contains { $0.hasSuffix("/" + b) }, "\(asked)")
        #expect(!asked.contains { $0.hasSuffix("/" + c) }, "no pull for a row that is not contradicted: \(asked)")
        // Each heal made one event caused by the status snapshot.
        let healEvents = try await ReadEvent.readAll(scene.fixture, topic: scene.fixture.eventsTopic(), atLeast: 1)
            .filter { $0.data["cause"]?.objectValue?["kind"] == .string("statusSnapshot") }
        #expect(Set(healEvents.map(\.subject)) == [a, b], "\(healEvents.map(\.subject))")
        await scene.finish()
    }

    @Test("without a key the row stays marked (granted until the backstop, or denied) and reconcile --contradicted heals it")
    func contradictedByHand() async throws {
        let (scene, events, _) = try await contradictedScene(workerHeals: false)
        let (a, b, c) = (events[0].originalTransactionId, events[1].originalTransactionId, events[3].originalTransactionId)
        #expect(try await Self.contradictionRows(scene) == [
            "\(a) active true appleActiveDatesPassed", "\(b) revoked false appleInactivePeriodOpen", "\(c) active true -",
        ], "marked: A granted until the backstop (its period ended 10 days ago), B denied")
        #expect(try await scene.query(
            "SELECT (contradiction_grants_until > now() + interval '6 days' AND contradiction_grants_until < now() + interval '7 days')::text FROM entitlements WHERE original_transaction_id = '\(a)'",
            as: String.self) == ["true"], "the backstop: 7 days from the contradicting notification")
        #expect(scene.apple.fake.requests.filter { $0.path.contains("/subscriptions/") }.isEmpty, "no key: nothing pulled by itself")

        let reconcile = try await scene.run(["reconcile"] + Self.app + ["--contradicted", "--json"], extra: Self.fast)
        #expect(reconcile.status == 0, "\(reconcile.output)")
        #expect(try await Self.contradictionRows(scene) == ["\(a) active true -", "\(b) revoked false -", "\(c) active true -"], "\(reconcile.output)")
        #expect(!scene.apple.fake.requests.map(\.path).contains { $0.hasSuffix("/" + c) })
        await scene.finish()
    }

    @Test("kill -9 of pipelinectl reconcile mid-run, then the same command: it resumes at the checkpointed id, none asked for twice")
    func killAndResume() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, withWorker: false)
        let minter = scene.fixture.minter
        var ids: [String] = []
        for index in 0..<20 {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: 9_500 + index, signedDate: 1_785_000_000_000, type: "DID_RENEW")
            event.originalTransactionId = String(3_000_000_000_095_000 + index)
            scene.apple.fake.setSubscription(Self.truth(event, minter: minter))
            ids.append(event.originalTransactionId)
        }
        // One id at a time, so the resumed run's requests are exactly the ids after the checkpoint, in order.
        let arguments = ["reconcile"] + Self.app + ["--transaction-id"] + ids + ["--wait", "1s", "--json", "--concurrency", "1"]
        let (process, _) = try scene.start(arguments, extra: ["APPSTORE_RATE_LIMIT_STATUSES": "4"])  // one every 0.25 s
        try await scene.kill(process, whenProgress: "SELECT coalesce(max(position), 0) FROM pull_runs", reaches: 8)
        let checkpoint = try #require(try await scene.query("SELECT position FROM pull_runs WHERE completed_at IS NULL", as: Int.self).first)
        #expect(checkpoint >= 8 && checkpoint < 20, "killed mid-run at \(checkpoint)")
        let before = scene.apple.fake.requests.count
        let resumed = try await scene.run(arguments, extra: Self.fast)
        #expect(resumed.status == 0, "\(resumed.output)")
        #expect(scene.summary(resumed.output)?["resumed"] == .bool(true) && scene.summary(resumed.output)?["processed"]?.int64Value == 20)
        let asked = scene.apple.fake.requests[before...].map { String($0.path.split(separator: "/").last ?? "") }
        #expect(asked == Array(ids[checkpoint...]), "resumed at id \(checkpoint + 1), each later id asked once: \(asked)")
        await scene.finish()
    }

    @Test("ordering: an older notification after a snapshot changes nothing, a newer one wins, and a replay from earliest ends in the same database")
    func ordering() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL)
        let minter = scene.fixture.minter
        let t0: Int64 = 1_785_000_000_000
        func event(_ step: Int, _ type: String, at time: Int64, status: Int32 = 1) -> NotificationMinter.SubscriptionEvent {
            var e = NotificationMinter.SubscriptionEvent.sample(seed: 6_001, signedDate: time, type: type)
            e.notificationUUID = deterministicUUID(6_001_000 + step)
            e.originalTransactionId = "3000000000006001"
            e.transactionId = String(3_100_000_000_006_000 + step)
            e.purchaseDate = time
            e.expiresDate = time + Self.month
            e.status = status
            return e
        }
        let older = event(1, "DID_RENEW", at: t0)
        var expiredTruth = event(2, "EXPIRED", at: t0 + Self.month + 1_000, status: 2)
        expiredTruth.purchaseDate = t0
        expiredTruth.expiresDate = t0 + Self.month
        expiredTruth.transactionId = older.transactionId
        let newer = event(3, "SUBSCRIBED", at: t0 + 2 * Self.month)
        // The snapshot first, then the older notification: the snapshot's state stays.
        scene.apple.fake.setSubscription(Self.truth(expiredTruth, minter: minter))
        let reconcile = try await scene.run(["reconcile"] + Self.app + ["--transaction-id", "3000000000006001", "--json"], extra: Self.fast)
        #expect(reconcile.status == 0, "\(reconcile.output)\n\(scene.fixture.logTail())")
        #expect(try await Self.rows(scene) == [Self.expectedRow(expiredTruth)])
        try await scene.fixture.produce([minter.signedNotification(older)])
        #expect(try await TestDatabase.waitForLedger(scene.database, count: 2))
        #expect(try await scene.fixture.waitForLag(group: scene.group))
        #expect(try await Self.rows(scene) == [Self.expectedRow(expiredTruth)], "an older notification does not undo Apple's newer status")
        // A newer notification wins.
        try await scene.fixture.produce([minter.signedNotification(newer)])
        #expect(try await TestDatabase.waitForLedger(scene.database, count: 3))
        #expect(try await scene.fixture.waitForLag(group: scene.group))
        #expect(try await Self.rows(scene) == [Self.expectedRow(newer)])
        let before = try await scene.digest()

        // Replay everything from earliest into the same database: nothing changes.
        await scene.fixture.stopOneByOne(scene.workers)
        let replay = try await scene.fixture.pipelinectl(["replay", "--group", scene.group, "--topic", scene.fixture.topic, "--to", "earliest"])
        #expect(replay.status == 0, "\(replay.output)")
        scene.workers = [try await scene.fixture.startWorker(group: scene.group, postgresURL: scene.database).process]
        #expect(try await scene.fixture.waitForLag(group: scene.group))
        #expect(try await scene.digest() == before, "a replay from earliest ends in the same database")
        await scene.finish()
    }

    @Test("onboarding: 200 subscriptions with 1–3 history pages each; every transaction stored, entitlements as Apple says; a second import asks only for changes")
    func onboarding() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL)
        let minter = scene.fixture.minter
        var ids: [String] = []
        var expectedRows: [String] = []
        var transactionCount = 0
        var subscriptions: [FakeAppStoreServerAPI.Subscription] = []
        for index in 0..<200 {
            let count = 5 + (index % 3) * 20  // 5, 25 or 45 transactions: 1, 2 or 3 pages of 20
            var events: [NotificationMinter.SubscriptionEvent] = []
            for step in 0..<count {
                let start = Int64(1_770_000_000_000) + Int64(step) * Self.month / 4
                var e = NotificationMinter.SubscriptionEvent.sample(seed: 7_000 + index, signedDate: start, type: "DID_RENEW")
                e.originalTransactionId = String(3_000_000_000_070_000 + index)
                e.transactionId = String(3_200_000_000_000_000 + index * 100 + step)
                e.purchaseDate = start
                e.expiresDate = start + Self.month / 4
                e.status = index % 4 == 0 ? 2 : 1
                events.append(e)
            }
            let history = events.map { minter.chain.sign(minter.transaction($0)) }
            subscriptions.append(Self.truth(events.last!, minter: minter, history: history))
            ids.append(events.last!.originalTransactionId)
            expectedRows.append(Self.expectedRow(events.last!))
            transactionCount += count
        }
        for subscription in subscriptions { scene.apple.fake.setSubscription(subscription) }
        let idFile = scene.fixture.directory + "/ids.txt"
        try (ids.joined(separator: "\n") + "\n4242424242424242\n").write(toFile: idFile, atomically: true, encoding: .utf8)

        let first = try await scene.run(["import"] + Self.app + ["--from-file", idFile, "--wait", "3m", "--json"], extra: Self.fast, timeout: .seconds(400))
        #expect(first.status == 0, "\(first.output.suffix(2_000))\n\(scene.fixture.logTail())")
        let summary = try #require(scene.summary(first.output), "\(first.output.suffix(2_000))")
        #expect(summary["transactions"]?.int64Value == Int64(transactionCount) && summary["snapshots"]?.int64Value == 200, "\(summary.serialized.prefix(500))")
        #expect(summary["unknownIds"]?.serialized.contains("4242424242424242") == true, "an id Apple does not know is reported, not fatal")
        #expect(try await TestDatabase.waitForLedger(scene.database, count: transactionCount + 200, timeout: .seconds(240)), "\(scene.fixture.logTail())")
        #expect(try await scene.query("SELECT count(*)::int FROM transactions", as: Int.self) == [transactionCount], "every transaction stored")
        let sample = try await scene.query(
            "SELECT transaction_id || ' ' || product_id || ' ' || (extract(epoch FROM expires_date) * 1000)::bigint FROM transactions WHERE transaction_id = '3200000000000244'",
            as: String.self)
        #expect(sample == ["3200000000000244 com.example.pipeline.pro.monthly \(Int64(1_770_000_000_000) + 44 * Self.month / 4 + Self.month / 4)"], "stored as decoded: \(sample)")
        #expect(try await Self.rows(scene) == expectedRows.sorted(), "entitlements as Apple says")

        // Five customers buy once more; a second import asks only for what changed.
        let before = scene.apple.fake.requests.count
        for index in 0..<5 {
            var subscription = subscriptions[index]
            var e = NotificationMinter.SubscriptionEvent.sample(seed: 7_000 + index, signedDate: 1_790_000_000_000, type: "DID_RENEW")
            e.originalTransactionId = subscription.originalTransactionId
            e.transactionId = String(3_200_000_000_000_000 + index * 100 + 99)
            e.purchaseDate = 1_790_000_000_000
            e.expiresDate = 1_790_000_000_000 + Self.month
            subscription.history.append(minter.chain.sign(minter.transaction(e)))
            scene.apple.fake.setSubscription(subscription)
        }
        let second = try await scene.run(["import"] + Self.app + ["--from-file", idFile, "--json"], extra: Self.fast, timeout: .seconds(400))
        #expect(second.status == 0, "\(second.output.suffix(2_000))")
        #expect(scene.summary(second.output)?["transactions"]?.int64Value == 5, "only the new transactions were fetched")
        let historyCalls = scene.apple.fake.requests[before...].filter { $0.path.hasPrefix("/inApps/v2/history/") }
        #expect(historyCalls.count == 201, "one call per id (and the unknown one), each from the stored revision: \(historyCalls.count)")
        await scene.finish()
    }

    @Test("consumption: a CONSUMPTION_REQUEST becomes pending; every rule violation is refused before any request; a valid answer is sent; a passed deadline is shown as missed")
    func consumption() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL)
        let minter = scene.fixture.minter
        func request(_ seed: Int, signedDate: Int64, productType: String) -> String {
            var e = NotificationMinter.SubscriptionEvent.sample(seed: seed, signedDate: signedDate, type: "CONSUMPTION_REQUEST")
            e.notificationUUID = deterministicUUID(8_000_000 + seed)
            e.transactionId = String(3_300_000_000_000_000 + seed)
            e.productType = productType
            e.includesStatus = false
            return minter.signedNotification(e)
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try await scene.fixture.produce([
            request(1, signedDate: now - 3_600_000, productType: "Consumable"), request(2, signedDate: now - 13 * 3_600_000, productType: "Consumable"),
            request(3, signedDate: now - 600_000, productType: "Auto-Renewable Subscription"),
        ])
        #expect(try await TestDatabase.waitForLedger(scene.database, count: 3), "\(scene.fixture.logTail())")
        let pending = try await scene.run(["consumption", "pending", "--json"])
        #expect(pending.status == 0, "\(pending.output)")
        let listed = try StrictJSONParser().parse(Array(pending.output.split(separator: "\n").last.map(String.init)!.utf8))
        guard case .array(let items) = listed else { Issue.record("\(pending.output)"); return }
        #expect(items.compactMap { $0.objectValue?["transactionId"]?.stringValue } == ["3300000000000002", "3300000000000001", "3300000000000003"], "soonest deadline first")
        #expect(items.first?.objectValue?["missed"] == .bool(true) && items.last?.objectValue?["missed"] == .bool(false), "a passed deadline is missed")

        let send = ["consumption", "send"] + Self.app
        let violations: [([String], String)] = [
            (["--transaction-id", "3300000000000001", "--delivery-status", "DELIVERED", "--sample-content-provided", "false"], "customerConsented"),
            (["--transaction-id", "3300000000000001", "--customer-consented", "--delivery-status", "LOST_IN_MAIL", "--sample-content-provided", "false"], "deliveryStatus"),
            (["--transaction-id", "3300000000000001", "--customer-consented", "--delivery-status", "DELIVERED", "--sample-content-provided", "false", "--consumption-percentage", "100001"], "milliunits"),
            (["--transaction-id", "3300000000000001", "--customer-consented", "--delivery-status", "UNDELIVERED_OTHER", "--sample-content-provided", "false", "--consumption-percentage", "5000"], "unless deliveryStatus is DELIVERED"),
            (["--transaction-id", "3300000000000003", "--customer-consented", "--delivery-status", "DELIVERED", "--sample-content-provided", "false", "--consumption-percentage", "0"], "auto-renewable"),
            (["--transaction-id", "3300000000000001", "--customer-consented", "--delivery-status", "DELIVERED", "--sample-content-provided", "false", "--refund-preference", "MAYBE"], "refundPreference"),
        ]
        for (arguments, rule) in violations {
            let refused = try await scene.run(send + arguments)
            #expect(refused.status != 0 && refused.output.contains(rule), "\(rule): \(refused.output)")
        }
        #expect(scene.apple.fake.requests.isEmpty, "every violation was refused before any request")

        let sent = try await scene.run(send + [
            "--transaction-id", "3300000000000001", "--customer-consented", "--delivery-status", "DELIVERED", "--sample-content-provided", "true",
            "--consumption-percentage", "25000", "--refund-preference", "DECLINE",
        ])
        #expect(sent.status == 0, "\(sent.output)")
        #expect(scene.apple.fake.requests.map(\.status) == [202])
        #expect(scene.apple.fake.consumptionAnswers["3300000000000001"]?.contains("\"consumptionPercentage\":25000") == true)
        let after = try await scene.run(["consumption", "pending", "--json"])
        #expect(!after.output.contains("3300000000000001") && after.output.contains("3300000000000002"), "answered requests leave the pending list")
        // The worker's gauges (read every 30 s): two pending, the nearest deadline already missed.
        let port = try #require(scene.opsPorts.first)
        var metrics = ""
        let deadline = ContinuousClock.now + .seconds(45)
        while ContinuousClock.now < deadline {
            metrics = (try? await HTTPTestConnection(port: port).send(method: "GET", path: "/metrics").bodyText) ?? ""
            if metrics.contains("worker_consumption_requests_pending 2") { break }
            try await Task.sleep(for: .seconds(1))
        }
        #expect(metrics.contains("worker_consumption_requests_pending 2"), "\(metrics.split(separator: "\n").filter { $0.contains("consumption") })")
        let seconds = metrics.split(separator: "\n").first { $0.hasPrefix("worker_consumption_request_deadline_seconds ") }.flatMap { Double($0.split(separator: " ")[1]) }
        #expect(seconds.map { $0 < 0 } == true, "the nearest deadline is reported as missed: \(String(describing: seconds))")
        await scene.finish()
    }

    @Test("bad input: a statuses answer with a forged JWS or an unknown status is dead-lettered with its reason; an empty group list applies nothing")
    func badStatuses() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL)
        let minter = scene.fixture.minter
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 9_001, signedDate: 1_785_000_000_000, type: "DID_RENEW")
        event.originalTransactionId = "3000000000009001"
        let signed = minter.chain.sign(minter.transaction(event))
        var forged = signed
        forged.removeLast(4)
        forged += signed.hasSuffix("AAAA") ? "BBBB" : "AAAA"
        func body(status: Int, transaction: String) -> String {
            JSONObject([
                "environment": .string("Production"), "bundleId": .string(FakeAppleFixture.bundleId), "appAppleId": .number(JSONNumber(minter.appAppleId)),
                "data": .array([.object(JSONObject(["subscriptionGroupIdentifier": .string("21000001"), "lastTransactions": .array([.object(JSONObject([
                    "originalTransactionId": .string("3000000000009001"), "status": .number(JSONNumber(Int64(status))), "signedTransactionInfo": .string(transaction),
                ]))])]))]),
            ]).serialized
        }
        scene.apple.fake.setRawStatuses(body(status: 1, transaction: forged), for: "1001")
        scene.apple.fake.setRawStatuses(body(status: 9, transaction: signed), for: "1002")
        scene.apple.fake.setRawStatuses(#"{"environment":"Production","bundleId":"com.example.pipeline.app","appAppleId":1234567890,"data":[]}"#, for: "1003")
        scene.apple.fake.setRawStatuses("{\"data\": 17}", for: "1004")
        let run = try await scene.run(["reconcile"] + Self.app + ["--transaction-id", "1001", "1002", "1003", "--wait", "10s", "--json"], extra: Self.fast)
        #expect(run.status == 0, "\(run.output)")
        #expect(scene.summary(run.output)?["snapshots"]?.int64Value == 2)
        let deadline = ContinuousClock.now + .seconds(60)
        var dead: [DeadLetter] = []
        while dead.count < 2, ContinuousClock.now < deadline {
            dead = try await scene.fixture.deadLetters(group: scene.group)
            if dead.count < 2 { try await Task.sleep(for: .milliseconds(500)) }
        }
        #expect(Set(dead.map(\.errorCode)) == ["nestedInvalid", "malformedPayload"], "\(dead.map { "\($0.errorCode): \($0.errorReason)" })")
        #expect(dead.contains { $0.errorReason.contains("signature") } && dead.contains { $0.errorReason.contains("status 9") }, "\(dead.map(\.errorReason))")
        #expect(try await Self.rows(scene).isEmpty, "nothing half-applied")
        let malformed = try await scene.run(["reconcile"] + Self.app + ["--transaction-id", "1004", "--restart"], extra: Self.fast)
        #expect(malformed.status != 0 && malformed.output.contains("StatusResponse.data"), "a malformed answer is an error naming the field: \(malformed.output)")
        await scene.finish()
    }
}
