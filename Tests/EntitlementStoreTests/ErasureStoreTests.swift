import AppStoreNotifications
@testable import EntitlementStore
import Foundation
import Logging
import PipelineConfiguration
import PostgresNIO
import StoreTestSupport
import TestSigning
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

/// Erasure against a real PostgreSQL: customer A erased, customer B untouched, A kept erased through a replay and
/// back after a renewal signed later; the worker refuses to guess without the key; the prune job.
@Suite("Erasure and retention against a real PostgreSQL", .serialized, .requiresPostgres)
struct ErasureStoreTests: MintedSuite {
    static let logger = quietLogger("erasure-tests")

    /// A's lifecycle (subscription 0, plus a second subscription continuing it through previousOriginalTransactionId
    /// with no token of its own) and B's (subscription 1), as stored records.
    func customers() async throws -> (a: [StoredNotification], b: [StoredNotification], aEvents: [NotificationMinter.SubscriptionEvent]) {
        let events = NotificationMinter.lifecycleEvents(subscriptions: 2)
        var aEvents = events.filter { $0.originalTransactionId.hasSuffix("0") }
        let bEvents = events.filter { $0.originalTransactionId.hasSuffix("1") }
        var continued = NotificationMinter.SubscriptionEvent.sample(seed: 99, signedDate: aEvents.last!.signedDate + 1_000, type: "SUBSCRIBED", subtype: "RESUBSCRIBE")
        continued.notificationUUID = deterministicUUID(77_000_001)
        continued.originalTransactionId = "3000000000000000777"
        continued.transactionId = "3100000000000000777"
        continued.previousOriginalTransactionId = aEvents[0].originalTransactionId
        continued.appAccountToken = ""
        continued.purchaseDate = continued.signedDate
        continued.expiresDate = continued.signedDate + 30 * 86_400_000
        aEvents.append(continued)
        var offset: Int64 = 0
        func stored(_ event: NotificationMinter.SubscriptionEvent) async throws -> StoredNotification {
            offset += 1
            let signed = minter.signedNotification(event)
            return StoredNotification(
                verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: offset,
                receivedAt: Timestamp(millisecondsSince1970: event.signedDate))
        }
        var a: [StoredNotification] = []
        for event in aEvents { a.append(try await stored(event)) }
        var b: [StoredNotification] = []
        for event in bEvents { b.append(try await stored(event)) }
        return (a, b, aEvents)
    }

    /// What an erasure writes by design: its own tables, the ledger's outcomes, and the customer.erased event.
    static let writtenByErasure: Set<String> = ["erasure_requests", "erasure_suppressions", "erasure_keys", "erased_events", "notification_ledger", "schema_migrations"]

    @Test("erasing A leaves no trace of A in any column of any table, B unchanged; a replay is suppressed; a later renewal starts anew")
    func eraseAndReplay() async throws {
        try await withMigratedStore("erasure", logger: Self.logger) { plain, client in
            let store = EntitlementStore(client: client, logger: Self.logger, erasureKey: erasureKey)
            let (a, b, aEvents) = try await customers()
            _ = try await store.store(a + b)
            // Webhook deliveries of every event (A's with an attempt whose excerpt echoes A's subscription), and a dead
            // letter claiming A's subscription.
            try await client.query(
                """
                INSERT INTO webhook_endpoints (id, url, description, bundle_ids, environment, event_types, allow_http, secret, enabled)
                VALUES ('we_1', 'https://example.invalid/hook', 'test', '{}', NULL, '{}', false, 'whsec_test', true)
                """, logger: Self.logger)
            // The months of the events' times, as the webhooks service makes them before it enqueues (migration 28).
            try await client.query(
                """
                SELECT ensure_time_partition_for(t, 'month', m) FROM unnest('{webhook_deliveries,webhook_attempts}'::regclass[]) AS t,
                    (SELECT DISTINCT event_time AS m FROM entitlement_events_outbox) x
                """, logger: Self.logger)
            try await client.query(
                """
                INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status)
                SELECT 'we_1', event_id, event_type, subject, event_time, 0, id, data, 'delivered' FROM entitlement_events_outbox
                """, logger: Self.logger)
            try await client.query(
                """
                INSERT INTO webhook_attempts (delivery_id, subject, event_time, status, latency_ms, response_excerpt)
                SELECT id, subject, event_time, 200, 5, 'ok ' || subject FROM webhook_deliveries
                """, logger: Self.logger)
            var letter = DeadLetteredRecord(
                position: RecordPosition(topic: "t", partition: 1, offset: 1), errorCode: "signatureInvalid", reason: "test",
                payload: Array(a[1].signedPayload.utf8))
            letter.claims.bundleId = minter.bundleId
            _ = try await store.store([], deadLettered: [letter])

            let aIdentifiers = Array(Set(aEvents.flatMap { [$0.originalTransactionId, $0.transactionId] } + [aEvents[0].appAccountToken]))
            let aUUIDs = aEvents.map(\.notificationUUID)
            #expect(try await DatabaseScan.textColumns(client).count > 60, "the scan reaches every table's text columns")
            let before = try await DatabaseScan.mentions(of: aIdentifiers, in: client)
            #expect(before.keys.contains("notification_archive.original_transaction_id") && before.keys.contains("webhook_deliveries.body"), "A is stored before: \(before)")
            let othersBefore = try await DatabaseScan.digestOfOthers(excluding: aIdentifiers + aUUIDs, in: client, except: Self.writtenByErasure, ignoring: ["customer.erased"])

            let report = try await ErasureStore(client: client, logger: Self.logger).erase(
                ErasureRequest(requestId: "ticket-1", subject: ErasureSubject(.appAccountToken, aEvents[0].appAccountToken.uppercased(), bundleId: minter.bundleId),
                    reason: "test", requestedBy: "test"), key: erasureKey)
            #expect(report.counts["subscriptions"] == 2, "A's subscription and the one continuing it: \(report.counts)")
            #expect(report.counts["notification_archive"] == a.count)
            #expect(report.counts["dead_lettered_records"] == 1)
            #expect((report.counts["webhook_deliveries"] ?? 0) > 0 && (report.counts["events"] ?? 0) > 0)

            let after = try await DatabaseScan.mentions(of: aIdentifiers, in: client)
            #expect(after.isEmpty, "A's identifiers remain in \(after)")
            let uuidsAfter = try await DatabaseScan.mentions(of: aUUIDs, in: client, except: ["notification_ledger"])
            #expect(uuidsAfter.isEmpty, "A's notification UUIDs remain outside the ledger in \(uuidsAfter)")
            var ledger = 0
            for try await count in try await client.query("SELECT count(*) FROM notification_ledger WHERE outcome = 'erased'", logger: Self.logger).decode(Int64.self) {
                ledger = Int(count)
            }
            #expect(ledger == a.count, "the ledger keeps A's UUIDs (a duplicate stays a no-op), marked erased")
            let othersAfter = try await DatabaseScan.digestOfOthers(excluding: aIdentifiers + aUUIDs, in: client, except: Self.writtenByErasure, ignoring: ["customer.erased"])
            #expect(othersAfter == othersBefore, "B's rows (and everything not A's) are unchanged")
            var erasedEvents: [String] = []
            for try await (type, subject, data) in try await client.query(
                "SELECT event_type, subject, data FROM entitlement_events_outbox WHERE event_type = 'customer.erased'", logger: Self.logger
            ).decode((String, String, String).self) {
                erasedEvents.append(type)
                #expect(subject == "ticket-1" && data.contains("\"requestId\":\"ticket-1\""))
            }
            #expect(erasedEvents == ["customer.erased"])
            // The same request again answers the same erasure; the id for another subject is refused.
            let again = try await ErasureStore(client: client, logger: Self.logger).erase(
                ErasureRequest(requestId: "ticket-1", subject: ErasureSubject(.appAccountToken, aEvents[0].appAccountToken, bundleId: minter.bundleId),
                    reason: "test", requestedBy: "test"), key: erasureKey)
            #expect(again.completedAt == report.completedAt)
            await #expect(throws: ErasureFailure.self) {
                _ = try await ErasureStore(client: client, logger: Self.logger).erase(
                    ErasureRequest(requestId: "ticket-1", subject: ErasureSubject(.customerId, UUID().uuidString, bundleId: minter.bundleId), reason: "t", requestedBy: "t"),
                    key: erasureKey)
            }

            // A replay of everything: A's records suppressed (not even duplicates), B's duplicates.
            var replay = a + b
            for index in replay.indices { replay[index].kafkaOffset = 1_000 + Int64(index) }
            let outcome = try await store.store(replay)
            #expect(outcome.suppressed["notification"] == a.count, "\(outcome.suppressed)")
            #expect(outcome.duplicates == b.count && outcome.applied == 0)
            #expect(try await DatabaseScan.mentions(of: aIdentifiers, in: client).isEmpty)

            // Without the key, or with another, a batch is refused rather than let through.
            await #expect(throws: ErasureFailure.keyMissing) { _ = try await plain.store(replay) }
            let other = EntitlementStore(client: client, logger: Self.logger, erasureKey: try ErasureKey(secret: String(repeating: "o", count: 40)))
            await #expect(throws: ErasureFailure.self) { _ = try await other.store(replay) }

            // A renewal Apple signed after the erasure (the person is still billed) is applied: a new history.
            let renewal = aEvents[1].renewedNow(transactionId: "3100000000000000888", notificationUUID: deterministicUUID(77_000_002), delay: 5_000)
            let signed = minter.signedNotification(renewal)
            let renewed = try await store.store([StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: 5_000)])
            #expect(renewed.applied == 1 && renewed.suppressed.isEmpty)
            var active = false
            for try await isActive in try await client.query(
                "SELECT is_active FROM entitlements_now WHERE original_transaction_id = \(renewal.originalTransactionId)", logger: Self.logger
            ).decode(Bool.self) { active = isActive }
            #expect(active, "the renewal signed after the erasure grants access")
        }
    }

    @Test("RESCIND_CONSENT is stored and makes consent.rescinded; with CONSENT_RESCINDED_ERASES it queues the erasure of what its app transaction links to")
    func rescindConsent() async throws {
        try await withMigratedStore("consent", logger: Self.logger) { _, client in
            let (a, b, aEvents) = try await customers()
            let appTransactionId = try #require(a[0].verified.transactionInfo?.model.appTransactionId)
            func rescind(_ seed: Int) async throws -> StoredNotification {
                let signed = minter.signedRescindConsent(
                    notificationUUID: deterministicUUID(seed), signedDate: aEvents.last!.signedDate + 60_000, appTransactionId: appTransactionId)
                return StoredNotification(verified: try await verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "t", kafkaPartition: 0, kafkaOffset: Int64(seed))
            }
            // Off (the default): stored, an event, nothing erased.
            let keeping = EntitlementStore(client: client, logger: Self.logger, erasureKey: erasureKey)
            _ = try await keeping.store(a + b + [try await rescind(88_000_001)])
            var events: [String] = []
            for try await subject in try await client.query(
                "SELECT subject FROM entitlement_events_outbox WHERE event_type = 'consent.rescinded'", logger: Self.logger).decode(String.self) { events.append(subject) }
            #expect(events == [appTransactionId])
            #expect(try await ErasureStore(client: client, logger: Self.logger).runPending(key: erasureKey).isEmpty)

            // On: a second RESCIND_CONSENT queues the erasure in its batch; running it erases A, not B.
            let erasing = EntitlementStore(client: client, logger: Self.logger, erasureKey: erasureKey, consentRescindedErases: true)
            _ = try await erasing.store([try await rescind(88_000_002)])
            var pending: [String] = []
            for try await subject in try await client.query("SELECT pending_subject FROM erasure_requests WHERE status = 'pending'", logger: Self.logger)
                .decode(String.self) { pending.append(subject) }
            #expect(pending == [appTransactionId])
            let reports = try await ErasureStore(client: client, logger: Self.logger).runPending(key: erasureKey)
            #expect(reports.count == 1 && reports.first?.counts["subscriptions"] == 2, "\(reports.map(\.counts))")
            let left = try await DatabaseScan.mentions(of: [aEvents[0].originalTransactionId, appTransactionId], in: client)
            #expect(left.isEmpty, "A remains in \(left)")
            #expect(try await DatabaseScan.mentions(of: [b[0].verified.transactionInfo!.model.originalTransactionId!], in: client)["entitlements.original_transaction_id"] == 1)
        }
    }

    @Test("the prune job deletes what is past each store's retention, in batches, and keeps what is inside it")
    func retention() async throws {
        try await withMigratedStore("retention", logger: Self.logger) { store, client in
            let (a, b, _) = try await customers()
            _ = try await store.store(a + b)
            for index in 0..<5 {
                _ = try await store.store([], deadLettered: [DeadLetteredRecord(position: RecordPosition(topic: "t", partition: 2, offset: Int64(index)), errorCode: "x")])
            }
            func count(_ sql: String) async throws -> Int {
                var result = 0
                for try await value in try await client.query(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(sql)"), logger: Self.logger).decode(Int64.self) {
                    result = Int(value)
                }
                return result
            }
            // Three dead letters are old.
            try await client.query("UPDATE dead_lettered_records SET dead_lettered_at = now() - interval '40 days' WHERE original_offset < 3", logger: Self.logger)
            var retention = RetentionStore(client: client, logger: Self.logger)
            retention.batchSize = 2
            var deadLetters = RetentionPolicy()
            deadLetters.archiveDays = nil
            #expect(try await retention.prune(deadLetters, dryRun: true)["dead_lettered_records"] == 3)
            #expect(try await retention.prune(deadLetters)["dead_lettered_records"] == 3)

            // The archive by signedDate: a cutoff inside the book's middle month, so whole months go as partitions
            // and the rest of that month in batches.
            var signedDates: [Date] = []
            for try await date in try await client.query("SELECT signed_date FROM notification_archive ORDER BY signed_date", logger: Self.logger)
                .decode(Date.self) { signedDates.append(date) }
            let cutoff = signedDates[signedDates.count / 2]
            let maintenance = PartitionMaintenance(client: client, logger: Self.logger)
            let wholeMonths = try await maintenance.partitions(of: "notification_archive", endingBy: cutoff)
            #expect(!wholeMonths.isEmpty, "the book spans months before the cutoff's")
            let old = try await count("notification_archive WHERE signed_date < '\(ISO8601DateFormatter().string(from: cutoff))'")
            let oldDeliveries = try await count("notification_deliveries WHERE signed_date < '\(ISO8601DateFormatter().string(from: cutoff))'")
            let total = try await count("notification_archive")
            var inWholeMonths = 0
            for partition in wholeMonths { inWholeMonths += try await maintenance.rowCount(of: partition) }
            #expect(old > 0 && old < total && old > inWholeMonths, "some old rows are in the cutoff's own month")
            var policy = RetentionPolicy()
            policy.archiveDays = 30
            let now = cutoff.addingTimeInterval(30 * 86_400)
            let counted = try await retention.prune(policy, now: now, dryRun: true)
            #expect(counted["notification_archive"] == old && counted["notification_deliveries"] == oldDeliveries, "\(counted)")
            let deleted = try await retention.prune(policy, now: now)
            #expect(deleted["notification_archive"] == old, "\(deleted)")
            #expect(deleted["notification_deliveries"] == oldDeliveries)
            #expect(try await maintenance.partitions(of: "notification_archive").allSatisfy { $0.upperBound > cutoff }, "whole months were dropped")
            #expect(try await maintenance.partitions(of: "notification_deliveries").allSatisfy { $0.upperBound > cutoff })
            #expect(try await count("notification_archive") == total - old, "what is inside the retention stays")
            #expect(try await count("notification_ledger") == a.count + b.count, "the ledger keeps every UUID: a late duplicate stays a no-op")
            #expect(try await retention.prune(policy, now: now).values.allSatisfy { $0 == 0 }, "a second run finds nothing")
            // A late duplicate of a dropped month is still a duplicate (the ledger kept it; the store, which had seen
            // that month's partitions, finds them gone and creates them again).
            #expect(try await store.store([a[0]]).duplicates == 1)
            #expect(try await count("notification_deliveries") > 0)
            policy.archiveDays = nil
            let kept = try await retention.prune(policy, now: Date().addingTimeInterval(10 * 365 * 86_400))
            #expect(kept["notification_archive"] == nil, "the archive is kept by default")
        }
    }

    @Test("the prune job deletes offer signatures never redeemed past OFFER_SIGNATURE_RETENTION_DAYS; redeemed and recent ones stay")
    func retentionCoversOfferSignatures() async throws {
        try await withMigratedStore("retention-offers", logger: Self.logger) { _, client in
            for (nonce, age, redeemed) in [("n1", "200 days", false), ("n2", "200 days", false), ("n3", "200 days", true), ("n4", "10 days", false)] {
                try await client.query(PostgresQuery(unsafeSQL: """
                    INSERT INTO offer_signatures (nonce, environment, bundle_id, customer_id, product_id, kind, offer_identifier, issued_at, rule,
                        redeemed_transaction_id)
                    VALUES ('\(nonce)', 'Production', 'b', 'c', 'p', 'promotional-offer', 'o', now() - interval '\(age)', 'r', \(redeemed ? "'t-\(nonce)'" : "NULL"))
                    """), logger: Self.logger)
            }
            let policy = try RetentionPolicy.fromEnvironment(EnvironmentReader([:]))
            #expect(policy.stores.contains { $0.store == "offer_signatures" && $0.limit == .seconds(180 * 86_400) })
            let deleted = try await RetentionStore(client: client, logger: Self.logger).prune(policy)
            #expect(deleted["offer_signatures"] == 2, "\(deleted)")
            var left: [String] = []
            for try await nonce in try await client.query("SELECT nonce FROM offer_signatures ORDER BY nonce", logger: Self.logger).decode(String.self) {
                left.append(nonce)
            }
            #expect(left == ["n3", "n4"], "the redeemed and the recent signatures stay")
        }
    }

    @Test("the prune job covers the webhook delivery log with its attempts and the published outbox (WEBHOOK_DELIVERY_RETENTION, EVENTS_OUTBOX_RETENTION)")
    func retentionCoversWebhooksAndOutbox() async throws {
        try await withMigratedStore("retention-webhooks", logger: Self.logger) { _, client in
            try await client.query(
                "INSERT INTO webhook_endpoints (id, url, secret) VALUES ('we_1', 'https://example.com/hook', 'whsec_x')", logger: Self.logger)
            // Four finished deliveries aged 5 days (two attempts each), one finished an hour ago, one pending aged 5 days.
            for (index, status, age) in [(0, "delivered", "5 days"), (1, "dead", "5 days"), (2, "delivered", "5 days"), (3, "delivered", "5 days"),
                                         (4, "delivered", "1 hour"), (5, "pending", "5 days")] {
                let finished = status == "pending" ? "NULL" : "now() - interval '\(age)'"
                try await client.query(PostgresQuery(unsafeSQL: """
                    WITH d AS (
                        INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status,
                            created_at, finished_at)
                        VALUES ('we_1', 'ev_\(index)', 'subscription.renewed', '1000', now(), 0, \(index), '{}', '\(status)', now() - interval '\(age)', \(finished))
                        RETURNING id, subject, event_time)
                    INSERT INTO webhook_attempts (delivery_id, subject, event_time, latency_ms) SELECT id, subject, event_time, 5 FROM d CROSS JOIN generate_series(1, 2)
                    """), logger: Self.logger)
            }
            // Three published events aged 10 days, one published today, one never published (aged 10 days), in
            // the outbox's partition of that day (migration 28; a worker writes only today's).
            try await client.query("SELECT ensure_time_partition_for('entitlement_events_outbox', 'day', now() - interval '10 days')", logger: Self.logger)
            for (index, published) in [(0, "now() - interval '10 days'"), (1, "now() - interval '10 days'"), (2, "now() - interval '10 days'"),
                                       (3, "now()"), (4, "NULL")] {
                try await client.query(PostgresQuery(unsafeSQL: """
                    INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, environment, bundle_id, data, created_at, published_at)
                    VALUES ('oe_\(index)', 'subscription.renewed', 's', '1000', now(), 'Production', 'b', '{}', now() - interval '10 days', \(published))
                    """), logger: Self.logger)
            }
            var policy = try RetentionPolicy.fromEnvironment(EnvironmentReader(["WEBHOOK_DELIVERY_RETENTION": "2d", "EVENTS_OUTBOX_RETENTION": "7d"]))
            #expect(policy.stores.contains { $0.store == "webhook_deliveries" && $0.limit == .seconds(2 * 86_400) })
            var retention = RetentionStore(client: client, logger: Self.logger)
            retention.batchSize = 3
            let counted = try await retention.prune(policy, dryRun: true)
            #expect(counted["webhook_deliveries"] == 4 && counted["webhook_attempts"] == 8 && counted["entitlement_events_outbox"] == 3, "\(counted)")
            let deleted = try await retention.prune(policy)
            #expect(deleted["webhook_deliveries"] == 4 && deleted["webhook_attempts"] == 8 && deleted["entitlement_events_outbox"] == 3, "\(deleted)")
            var left: [String] = []
            for try await id in try await client.query("SELECT event_id FROM webhook_deliveries ORDER BY event_id", logger: Self.logger).decode(String.self) {
                left.append(id)
            }
            #expect(left == ["ev_4", "ev_5"], "the recent and the pending deliveries stay")
            var attempts = 0
            for try await count in try await client.query("SELECT count(*) FROM webhook_attempts", logger: Self.logger).decode(Int64.self) { attempts = Int(count) }
            #expect(attempts == 4)
            var events: [String] = []
            for try await id in try await client.query("SELECT event_id FROM entitlement_events_outbox ORDER BY event_id", logger: Self.logger).decode(String.self) {
                events.append(id)
            }
            #expect(events == ["oe_3", "oe_4"], "the recent and the unpublished events stay")
            policy.webhookDeliveries = nil
            policy.publishedEvents = nil
            let kept = try await retention.prune(policy, now: Date().addingTimeInterval(365 * 86_400))
            #expect(kept["webhook_deliveries"] == nil && kept["entitlement_events_outbox"] == nil, "keep keeps")
        }
    }
}
