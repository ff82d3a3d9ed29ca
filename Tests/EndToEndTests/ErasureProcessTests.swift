import AppStoreNotifications
import EntitlementStore
import Foundation
import PipelineTestSupport
import PostgresNIO
import TestSigning
import TestSupport
import Testing
import TestGates

/// Erasure through the real processes: ingest, a worker (with its events relay), webhooks and a receiver on
/// loopback, the fake App Store Server API; then everything that replays.
@Suite("Erasure: a customer erased stays erased through replay, re-drive, backfill and reconcile", .serialized, .requiresKafkaAndPostgres)
struct ErasureProcessTests: ProcessSuite {
    /// `erasure_suppressed_total` by record kind, as a worker's /metrics says.
    static func suppressed(port: Int) async -> [String: Int] {
        let text = (try? await HTTPTestConnection(port: port).send(method: "GET", path: "/metrics").bodyText) ?? ""
        var counts: [String: Int] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("erasure_suppressed_total{") {
            guard let kind = line.split(separator: "\"").dropFirst().first, let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
            counts[String(kind)] = Int(value)
        }
        return counts
    }

    @Test("customer A erased by pipelinectl: no table holds A, B unchanged; customer.erased reaches the receiver; replay, re-drive, backfill and reconcile suppress exactly A's records; a renewal signed after the erasure is applied")
    func erasedStaysErased() async throws {
        // The erasure key, minted for this test.
        let keyFile = try mintedErasureKeyFile()
        defer { removeMintedFile(keyFile) }
        let erasure = ["ERASURE_KEY_FILE": keyFile]
        let fast = ["APPSTORE_RATE_LIMIT_STATUSES": "1000", "APPSTORE_RATE_LIMIT_TRANSACTION_HISTORY": "1000", "APPSTORE_RATE_LIMIT_HISTORY": "1000"]
        let scene = try await WebhooksScene(bootstrap: bootstrap, postgresURL: postgresURL, workerEnvironment: erasure)
        let pull = scene.scene
        try await pull.startIngest()
        let endpoint = try await scene.add("/hook/erasure")
        try await scene.startWebhooks(extra: erasure)
        let minter = scene.fixture.minter

        let events = NotificationMinter.lifecycleEvents(subscriptions: 2, start: Int64(Date().timeIntervalSince1970 * 1000) - 90 * 86_400_000)
        let aEvents = events.filter { $0.originalTransactionId.hasSuffix("0") }
        let bEvents = events.filter { $0.originalTransactionId.hasSuffix("1") }
        for event in events { #expect(await pull.deliver(minter.signedNotification(event)) == .success) }
        // A forged notification claiming A's subscription: dead-lettered (and kept in Apple's history by the fake).
        let forger = NotificationMinter(chain: try TestCertificateAuthority().issueChain())
        var forged = aEvents[0]
        forged.notificationUUID = UUID().uuidString.lowercased()
        #expect(await pull.deliver(forger.signedNotification(forged)) == .success)
        #expect(try await TestDatabase.waitForLedger(pull.database, count: events.count), "\(scene.fixture.logTail())")
        #expect(try await scene.fixture.waitForLag(group: pull.group))
        let expected = try await pull.query("SELECT count(*)::int FROM entitlement_events_outbox", as: Int.self).first ?? 0
        let topic = try await scene.topicEvents(atLeast: expected)
        #expect(try await scene.waitDelivered(Set(topic.byId.keys), path: "/hook/erasure"), "\(scene.fixture.logTail())")
        #expect(try await pull.query("SELECT count(*)::int FROM dead_lettered_records", as: Int.self).first == 1)
        // Apple's truth for both: statuses and the whole transaction history (for reconcile and import).
        for (event, story) in [(aEvents.last!, aEvents), (bEvents.last!, bEvents)] {
            pull.apple.fake.setSubscription(FakeAppStoreServerAPI.Subscription(
                originalTransactionId: event.originalTransactionId, subscriptionGroupIdentifier: "21000001", status: event.status,
                signedTransactionInfo: minter.chain.sign(minter.transaction(event)), signedRenewalInfo: minter.chain.sign(minter.renewalInfo(event)),
                history: story.map { minter.chain.sign(minter.transaction($0)) }))
        }

        let aIdentifiers = Array(Set(aEvents.flatMap { [$0.originalTransactionId, $0.transactionId] } + [aEvents[0].appAccountToken]))
        // B's rows as they must stay: archive, transactions, entitlement, events (without what a replay may restamp).
        let b = bEvents[0].originalTransactionId
        let bRows = {
            try await pull.query(
                """
                SELECT x FROM (
                    SELECT (to_jsonb(n) - 'stored_at' - 'received_at' - 'kafka_topic' - 'kafka_partition' - 'kafka_offset' - 'source')::text AS x
                        FROM notification_archive n WHERE original_transaction_id = '\(b)'
                    UNION ALL SELECT to_jsonb(t)::text FROM transactions t WHERE original_transaction_id = '\(b)'
                    UNION ALL SELECT (to_jsonb(e) - 'updated_at')::text FROM entitlements e WHERE original_transaction_id = '\(b)'
                    UNION ALL SELECT (to_jsonb(o) - 'published_at')::text FROM entitlement_events_outbox o WHERE original_transaction_id = '\(b)'
                    UNION ALL SELECT (to_jsonb(w) - 'next_attempt_at' - 'leased_until' - 'lease_token')::text FROM webhook_deliveries w WHERE subject = '\(b)'
                ) s ORDER BY x
                """, as: String.self)
        }
        let bBefore = try await bRows()
        #expect(!bBefore.isEmpty)
        #expect(try await TestDatabase.with(pull.database) { try await DatabaseScan.mentions(of: aIdentifiers, in: $0) }.count > 5)

        // A's outbox rows pruned before the erasure (EVENTS_OUTBOX_RETENTION passed): erased_events will not know
        // their ids, yet the events topic still has them for a replay.
        _ = try await pull.query("DELETE FROM entitlement_events_outbox WHERE original_transaction_id = '\(aEvents[0].originalTransactionId)' RETURNING 1", as: Int.self)
        let erasedAt = Int64(Date().timeIntervalSince1970 * 1000)
        let erased = try await pull.run(
            ["customers", "erase", "--app-account-token", aEvents[0].appAccountToken, "--bundle-id", minter.bundleId, "--reason", "ticket 1", "--request-id",
             "privacy-1", "--json"], extra: erasure)
        #expect(erased.status == 0, "\(erased.output)")
        let report = try StrictJSONParser().parseObject(Array((erased.output.split(separator: "\n").last.map(String.init) ?? "").utf8))
        #expect(report["counts"]?.objectValue?["subscriptions"]?.int64Value == 1 && report["status"]?.stringValue == "completed", "\(erased.output)")
        let left = try await TestDatabase.with(pull.database) { try await DatabaseScan.mentions(of: aIdentifiers, in: $0) }
        #expect(left.isEmpty, "A remains in \(left)")
        #expect(try await bRows() == bBefore, "B's rows are unchanged")

        // customer.erased reaches the receiver, with the request id as its subject.
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline, !scene.receiver.deliveries.contains(where: { $0.type == "customer.erased" && $0.status == 200 }) {
            try await Task.sleep(for: .milliseconds(200))
        }
        let notice = scene.receiver.deliveries.first { $0.type == "customer.erased" }
        #expect(notice?.subject == "privacy-1", "\(scene.fixture.logTail())")
        #expect(!(notice.map { String(decoding: $0.body, as: UTF8.self) } ?? "").contains(aEvents[0].originalTransactionId))
        // `webhooks replay` of everything the topic holds: A's events (pruned from the outbox before the erasure) make
        // no delivery; B's are delivered again.
        let aDelivered = scene.receiver.deliveries.filter { $0.subject == aEvents[0].originalTransactionId }.count
        let replayed = try await pull.run(["webhooks", "replay", "--endpoint", endpoint.id, "--since", "1d"], extra: scene.toolEnvironment.merging(erasure) { $1 })
        #expect(replayed.status == 0, "\(replayed.output)")
        #expect(try await pull.query("SELECT count(*)::int FROM webhook_deliveries WHERE subject = '\(aEvents[0].originalTransactionId)'", as: Int.self).first == 0)
        try await Task.sleep(for: .seconds(2))
        #expect(scene.receiver.deliveries.filter { $0.subject == aEvents[0].originalTransactionId }.count == aDelivered, "no new delivery about A")

        // Replay from earliest (a worker restarted on the rewound group), re-drive the dead letters, backfill, reconcile A.
        await scene.fixture.stopOneByOne(pull.workers)
        let replay = try await scene.fixture.pipelinectl(["replay", "--group", pull.group, "--topic", scene.fixture.topic, "--to", "earliest"])
        #expect(replay.status == 0, "\(replay.output)")
        let (worker, port) = try await scene.fixture.startWorker(group: pull.group, postgresURL: pull.database, extra: erasure)
        pull.workers = [worker]
        #expect(try await scene.fixture.waitForLag(group: pull.group))
        // Without the key, a pull command refuses (it cannot tell an erased customer's records apart).
        let keyless = try await pull.run(["dlq", "redrive"])
        #expect(keyless.status != 0 && keyless.output.contains("ERASURE_KEY_FILE"), "\(keyless.output)")
        let redrive = try await pull.run(["dlq", "redrive", "--json"], extra: erasure)
        #expect(redrive.status == 0, "\(redrive.output)")
        #expect(redrive.output.contains("\"erasedHeldBack\":1"), "the forged record claiming A is held back: \(redrive.output)")
        #expect(try await scene.fixture.waitForLag(group: pull.group))
        let backfill = try await pull.run(
            ["backfill", "--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production", "--since", "1h", "--json"], extra: fast.merging(erasure) { $1 })
        #expect(backfill.status == 0, "\(backfill.output)")
        #expect(backfill.output.contains("\"erasedHeldBack\":\(aEvents.count + 1)"), "A's notifications and the forged one: \(backfill.output)")
        #expect(try await scene.fixture.waitForLag(group: pull.group))
        let reconcile = try await pull.run(
            ["reconcile", "--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production", "--transaction-id", aEvents[0].originalTransactionId,
             "--wait", "3s", "--json"], extra: fast.merging(erasure) { $1 })
        #expect(reconcile.status == 0, "\(reconcile.output)")
        // A run is found again by a keyed digest, never a plain SHA-256 of the ids (reversible by enumerating them).
        let runKeys = try await pull.query("SELECT arguments_key FROM pull_runs UNION ALL SELECT arguments_key FROM backfill_runs", as: String.self)
        #expect(runKeys.contains { $0.contains("hmac:") }, "\(runKeys)")
        #expect(!runKeys.contains { $0.contains(ContentDigest.sha256Hex(aEvents[0].originalTransactionId)) }, "\(runKeys)")
        // import of A's transaction ids: nothing produced, no history revision kept (issue 51: 12 rows came back).
        let imported = try await pull.run(
            ["import", "--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production", "--transaction-id"] + aEvents.map(\.transactionId)
                + ["--wait", "3s", "--json"], extra: fast.merging(erasure) { $1 })
        #expect(imported.status == 0, "\(imported.output)")
        #expect(try await scene.fixture.waitForLag(group: pull.group))

        let counts = await Self.suppressed(port: port)
        #expect(counts["notification"] == aEvents.count, "only the replay's of A's notifications reach a worker: \(counts)")
        #expect(counts["statusSnapshot"] == nil && counts["historyTransaction"] == nil, "reconcile and import produce nothing of A: \(counts)")
        #expect(counts["deadLetter"] == 1, "the forged record claiming A, from the replay only: \(counts)")
        let stillLeft = try await TestDatabase.with(pull.database) { try await DatabaseScan.mentions(of: aIdentifiers, in: $0) }
        #expect(stillLeft.isEmpty, "A came back in \(stillLeft)")
        #expect(try await pull.query("SELECT count(*)::int FROM transaction_history_revisions", as: Int.self).first == 0)
        #expect(try await bRows() == bBefore, "B unchanged after the replays")
        // The notifications topic holds nothing new about A: every record produced since the erasure names no A id.
        let records = try await readTopic(bootstrap, topic: scene.fixture.topic, atLeast: Int.max, timeout: .seconds(5))
        let since = records.filter { ($0.timestamp ?? 0) >= erasedAt }
        #expect(!since.isEmpty, "the re-drive, backfill and import produced B's records")
        let aNamed = since.filter { record in
            let kind = record.headers.string("record-kind").flatMap(PulledRecordKind.init(rawValue:))
            let claim = ErasureClaim.of(record: record.value, kind: kind) ?? DeadLetteredRecordClaim.of(record.value)
            return claim?.identifiers.contains { aIdentifiers.contains($0.value) } ?? false
        }
        #expect(aNamed.isEmpty, "\(aNamed.count) record(s) about A were produced after the erasure")

        // A renewal Apple signs after the erasure: applied, access granted, a new history.
        let renewal = aEvents[1].renewedNow(transactionId: "3100000000000009999", notificationUUID: UUID().uuidString.lowercased(), delay: 1_000)
        #expect(await pull.deliver(minter.signedNotification(renewal)) == .success)
        #expect(try await scene.fixture.waitForLag(group: pull.group))
        let active = try await pull.query(
            "SELECT is_active FROM entitlements_now WHERE original_transaction_id = '\(renewal.originalTransactionId)'", as: Bool.self)
        #expect(active == [true], "\(scene.fixture.logTail())")
        await scene.finish()
    }
}

/// A record's claim whatever its kind (a re-driven record keeps its kind header; a forged one may have none).
enum DeadLetteredRecordClaim {
    static func of(_ value: [UInt8]) -> ErasureClaim? {
        DeadLetteredRecord(position: RecordPosition(topic: "", partition: 0, offset: 0), errorCode: "", payload: value).erasureClaim
    }
}
