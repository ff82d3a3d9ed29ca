import AppStoreNotifications
import Foundation
import KafkaClient
import ServiceRuntime
import PostgresNIO
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
import PipelineTestSupport
import TestGates
#endif

/// Entitlement events as a plain Kafka consumer sees them, from worker processes against the real broker and
/// PostgreSQL: what each subscription's events must be is computed here, independently of the outbox code, from
/// the delivery order and the one state machine.
@Suite(
    "Entitlement events through worker processes", .serialized,
    .requiresKafkaAndPostgres)
struct EventsProcessTests: ProcessSuite {
    /// The decisive fields at `time`, written out here rather than taken from the code under test.
    static func expectedFields(_ state: EntitlementState, at time: Int64) -> JSONObject {
        func date(_ t: Timestamp?) -> JSONValue { t.map { .string($0.rfc3339Milliseconds) } ?? .null }
        let active: Bool
        switch state.status {
        case .active: active = state.expiresAt.map { $0.millisecondsSince1970 > time } ?? true
        case .gracePeriod:
            if let grace = state.gracePeriodExpiresAt { active = grace.millisecondsSince1970 > time }
            else { active = state.expiresAt.map { $0.millisecondsSince1970 + 28 * 86_400_000 > time } ?? true }
        default: active = false
        }
        return JSONObject([
            "status": .string(state.status.rawValue), "isActive": .bool(active), "expiresDate": date(state.expiresAt),
            "productId": state.productId.map { .string($0) } ?? .null,
            "autoRenewStatus": state.autoRenewStatus.map { .number(JSONNumber(Int64($0))) } ?? .null,
            "autoRenewProductId": state.autoRenewProductId.map { .string($0) } ?? .null,
            "gracePeriodExpiresDate": date(state.gracePeriodExpiresAt), "revocationDate": date(state.revocationDate),
            "revocationReason": state.revocationReason.map { .number(JSONNumber(Int64($0))) } ?? .null,
            "revocationType": state.revocationType.map { .string($0) } ?? .null, "supersededBy": state.supersededBy.map { .string($0) } ?? .null,
        ])
    }

    /// Per subscription, the `after` of each event a delivery in `order` must make: notifications applied once
    /// each (duplicates skipped), stale ones changing nothing, an event only where a decisive field changed.
    static func expectedEvents(_ payloads: [String], verifier: SignedPayloadVerifier) async throws -> [String: [JSONObject]] {
        var seen: Set<String> = []
        var states: [String: EntitlementState] = [:]
        var lastAfter: [String: JSONObject] = [:]
        var expected: [String: [JSONObject]] = [:]
        for payload in payloads {
            let verified = try await verifier.verifyNotification(payload)
            guard let uuid = verified.payload.notificationUUID, seen.insert(uuid).inserted,
                let id = verified.transactionInfo?.model.originalTransactionId
            else { continue }
            guard case .updated(let state) = EntitlementTransition.apply(verified, to: states[id]) else { continue }
            states[id] = state
            let after = expectedFields(state, at: verified.signedDate.millisecondsSince1970)
            if lastAfter[id] != after {
                expected[id, default: []].append(after)
                lastAfter[id] = after
            }
        }
        return expected
    }

    /// Checks one delivery's events against `expected`: deduplicated by id, each subscription's events are
    /// numbered 1…n in topic order, each `before` is the previous `after`, the `after`s are the expected ones.
    static func check(_ events: [ReadEvent], expected: [String: [JSONObject]], _ phase: String) {
        var firstById: [String: ReadEvent] = [:]
        var ordered: [String: [ReadEvent]] = [:]
        for event in events where firstById[event.id] == nil {
            firstById[event.id] = event
            if event.sequence != nil { ordered[event.subject, default: []].append(event) }
        }
        for event in events where firstById[event.id]!.data != event.data {
            Issue.record("\(phase): two different events share the id \(event.id)")
        }
        #expect(Set(ordered.keys) == Set(expected.keys), "\(phase): subscriptions with events")
        for (subject, subscriptionEvents) in ordered {
            let wanted = expected[subject] ?? []
            #expect(subscriptionEvents.map(\.sequence) == (1...Int64(max(1, subscriptionEvents.count))).map { Optional($0) }, "\(phase): \(subject) sequences \(subscriptionEvents.map(\.sequence))")
            #expect(subscriptionEvents.map { $0.after } == wanted.map { Optional($0) }, "\(phase): \(subject): \(subscriptionEvents.map(\.type))")
            var previous: JSONObject?
            for event in subscriptionEvents {
                if let previous { #expect(event.before == previous, "\(phase): \(subject) #\(event.sequence ?? 0): before is not the previous after") }
                else { #expect(event.data["before"] == .null, "\(phase): \(subject): the first event's before is null") }
                previous = event.after
                #expect(event.headers["ce_sequence"] == nil, "the order is data.sequence within a subject, not the CloudEvents sequence extension (which orders within a source)")
            }
        }
    }

    @Test("lifecycles with duplicates and stale deliveries: each subscription's events in order, chained, none for duplicates; kill -9 and replay add no new ids")
    func lifecycles() async throws {
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 4)
        let verifier = try SignedPayloadVerifier(configuration: .init(
            apps: [AppIdentity(bundleId: fixture.minter.bundleId, appAppleId: fixture.minter.appAppleId)], trustedRoots: try TrustAnchorLoader.certificates(
                in: [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixture.rootFile))))))

        // 60 lifecycles; every 7th subscription's second and third notifications delivered in reverse (the
        // newer first, so the older is stale); ~10 % duplicates at the end.
        let events = NotificationMinter.lifecycleEvents(subscriptions: 60)
        var ordered = events.map(fixture.minter.signedNotification)
        var positions: [String: [Int]] = [:]
        for (position, event) in events.enumerated() { positions[event.originalTransactionId, default: []].append(position) }
        var reversed = 0
        for (id, at) in positions where at.count >= 3 && Int(id.suffix(4))! % 7 == 0 {
            ordered.swapAt(at[1], at[2])
            reversed += 1
        }
        #expect(reversed >= 5)
        let distinct = ordered.count
        var payloads = ordered
        for position in stride(from: 0, to: distinct, by: 10) { payloads.append(ordered[position]) }
        let expected = try await Self.expectedEvents(payloads, verifier: verifier)
        let expectedCount = expected.values.map(\.count).reduce(0, +)
        #expect(expectedCount > 100, "the stream makes changes (\(expectedCount))")

        // A. Undisturbed, two workers.
        try await fixture.produce(payloads)
        let groupA = TestServices.uniqueName("events")
        let databaseA = try await TestDatabase.create("ev" + UUID().uuidString.prefix(8).lowercased() + "a", on: postgresURL)
        var workers = [try await fixture.startWorker(group: groupA, postgresURL: databaseA).process, try await fixture.startWorker(group: groupA, postgresURL: databaseA).process]
        #expect(try await TestDatabase.waitForLedger(databaseA, count: distinct), "\(fixture.logTail())")
        let readA = try await ReadEvent.readAll(fixture, topic: fixture.eventsTopic(), atLeast: expectedCount)
        Self.check(readA, expected: expected, "undisturbed")
        #expect(readA.count == expectedCount, "no event twice without a fault: \(readA.count) records for \(expectedCount) events")
        for event in readA {
            #expect(event.headers[CloudEventsHeader.specVersion] == "1.0" && event.headers[CloudEventsHeader.contentType] == "application/json")
            #expect(event.headers[CloudEventsHeader.source] == "/apps/\(fixture.minter.bundleId)/Sandbox" || event.headers[CloudEventsHeader.source] == "/apps/\(fixture.minter.bundleId)/Production")
            #expect(event.data["cause"]?.objectValue?["kind"] == .string("notification"))
        }
        // The last `after` of each subscription is its row.
        let rows = try await TestDatabase.with(databaseA) { client in
            var rows: [String: JSONObject] = [:]
            for try await (id, after, sequence) in try await client.query(
                "SELECT original_transaction_id, last_event_after::text, event_sequence FROM entitlements", logger: ingestTestLogger
            ).decode((String, String?, Int64?).self) {
                if let after { rows[id] = try StrictJSONParser().parseObject(Array(after.utf8)) }
                #expect(sequence == Int64(expected[id]?.count ?? 0), "\(id): the row's sequence is its last event's")
            }
            return rows
        }
        // (jsonb keeps keys in its own order: compared as sets of members.)
        func members(_ object: JSONObject?) -> [String: JSONValue]? { object.map { Dictionary($0.members.map { ($0.key, $0.value) }) { first, _ in first } } }
        for (id, afters) in expected { #expect(members(rows[id]) == members(afters.last), "\(id): the last after equals the row") }

        // pipelinectl events tail reads the topic, filtered.
        let subject = try #require(expected.keys.sorted().first)
        let tail = try await fixture.pipelinectl(["events", "tail", "--events-topic", fixture.eventsTopic(), "--original-transaction-id", subject, "--json"])
        #expect(tail.status == 0, "\(tail.output)")
        let tailed = tail.output.split(separator: "\n").compactMap { try? StrictJSONParser().parseObject(Array($0.utf8)) }
        #expect(tailed.map { $0["data"]?.objectValue?["after"]?.objectValue } == (expected[subject] ?? []).map { Optional($0) }, "\(tail.output)")
        #expect(tailed.allSatisfy { $0["specversion"] == .string("1.0") && $0["subject"] == .string(subject) })
        let revoked = try await fixture.pipelinectl(["events", "tail", "--events-topic", fixture.eventsTopic(), "--type", "entitlement.revoked"])
        let revokedLines = revoked.output.split(separator: "\n").filter { $0.contains("entitlement.revoked") }
        #expect(revokedLines.count == readA.filter { $0.type == "entitlement.revoked" }.count && revokedLines.count > 0, "\(revoked.output.prefix(500))")

        // Replay from earliest: every notification is a duplicate now, so no new event.
        await fixture.stopOneByOne(workers)
        let replay = try await fixture.pipelinectl(["replay", "--group", groupA, "--topic", fixture.topic, "--to", "earliest"])
        #expect(replay.status == 0, "\(replay.output)")
        workers = [try await fixture.startWorker(group: groupA, postgresURL: databaseA).process]
        #expect(try await fixture.waitForLag(group: groupA), "\(fixture.logTail())")
        try await Task.sleep(for: .seconds(1))  // a relay round or more after the last batch
        await fixture.stopOneByOne(workers)
        let afterReplay = try await ReadEvent.readAll(fixture, topic: fixture.eventsTopic(), atLeast: expectedCount)
        #expect(afterReplay.count == readA.count, "the replay published \(afterReplay.count - readA.count) more events")

        // B. kill -9 of a worker mid-stream, on a topic of its own holding only the first half when the kill lands:
        // every expected event arrives at least once with the same ids as in A, in order after dedupe.
        let topicB = fixture.topic + ".b"
        try await fixture.createTopics(partitions: 4, topic: topicB)
        let databaseB = try await TestDatabase.create("ev" + UUID().uuidString.prefix(8).lowercased() + "b", on: postgresURL)
        let groupB = TestServices.uniqueName("events-killed")
        workers = try await fixture.killOneWorkerMidStream(payloads, distinct: distinct, topic: topicB, group: groupB, database: databaseB, batchSize: 10).workers
        #expect(try await TestDatabase.waitForLedger(databaseB, count: distinct), "\(fixture.logTail())")
        let readB = try await ReadEvent.readAll(fixture, topic: fixture.eventsTopic(topicB), atLeast: expectedCount)
        await fixture.stopOneByOne(workers)
        Self.check(readB, expected: expected, "kill -9")
        #expect(Set(readB.map(\.id)) == Set(readA.map(\.id)), "the same ids as the undisturbed run")
    }

    @Test("broker away: the outbox piles up and its age grows while notifications were stored; back: the events arrive in order")
    func brokerOutage() async throws {
        _ = try RequiredServices.bootstrap
        let postgresURL = try RequiredServices.postgresURL
        let broker = try #require(PrivateKafkaBroker(persistent: true), "PIPELINE_TANSU_BIN/PIPELINE_OBJECT_STORE_BIN not set (scripts/services.sh env)")
        try await broker.start()
        defer { broker.kill() }
        let fixture = try WorkerProcessFixture(bootstrap: broker.bootstrapServers)
        try await fixture.createTopics(partitions: 2)
        let verifier = try SignedPayloadVerifier(configuration: .init(
            apps: [AppIdentity(bundleId: fixture.minter.bundleId, appAppleId: fixture.minter.appAppleId)], trustedRoots: try TrustAnchorLoader.certificates(
                in: [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixture.rootFile))))))
        let payloads = NotificationMinter.lifecycleEvents(subscriptions: 20, firstSubscription: 500).map(fixture.minter.signedNotification)
        let expected = try await Self.expectedEvents(payloads, verifier: verifier)
        let expectedCount = expected.values.map(\.count).reduce(0, +)
        let database = try await TestDatabase.create("ev" + UUID().uuidString.prefix(8).lowercased() + "o", on: postgresURL)
        try await fixture.produce(payloads)

        // The relay is elected by an advisory lock: holding it here keeps every relay waiting while the worker
        // stores the notifications, so the events are in the outbox when the broker goes away.
        let group = TestServices.uniqueName("events-outage")
        let lockHolder = PostgresClient(configuration: try .init(url: database), backgroundLogger: ingestTestLogger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await lockHolder.run() }
            defer { tasks.cancelAll() }
            var started: (process: Process, opsPort: Int)?
            try await lockHolder.withConnection { connection in
                try await connection.query("SELECT pg_advisory_lock(\(Int64(0x6576_7473)))", logger: ingestTestLogger)
                started = try await fixture.startWorker(group: group, postgresURL: database)
                #expect(try await TestDatabase.waitForLedger(database, count: payloads.count), "\(fixture.logTail())")
                broker.kill()
                try await connection.query("SELECT pg_advisory_unlock(\(Int64(0x6576_7473)))", logger: ingestTestLogger)
            }
            let (worker, opsPort) = try #require(started)
            // The relay fails while the broker is away; the oldest event's age grows on /metrics.
            let connection = HTTPTestConnection(port: opsPort)
            func age() async throws -> Double {
                let metrics = try await connection.send(method: "GET", path: "/metrics").bodyText
                let line = metrics.split(separator: "\n").first { $0.hasPrefix("events_outbox_oldest_age_seconds ") }
                return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? -1
            }
            try await Task.sleep(for: .seconds(2))
            let first = try await age()
            try await Task.sleep(for: .seconds(2))
            let second = try await age()
            #expect(first > 0 && second > first, "the outbox's oldest age grows while the broker is away (\(first) s, then \(second) s)")
            let waiting = try await TestDatabase.with(database) { client in
                try await client.query("SELECT count(*)::int FROM entitlement_events_outbox WHERE published_at IS NULL", logger: ingestTestLogger).decode(Int.self).reduce(0, +)
            }
            #expect(waiting == expectedCount, "every event waits in the outbox (\(waiting) of \(expectedCount))")

            try await broker.start()
            let read = try await ReadEvent.readAll(fixture, topic: fixture.eventsTopic(), atLeast: expectedCount)
            Self.check(read, expected: expected, "after the outage")
            await fixture.stopOneByOne([worker])
        }
    }
}
