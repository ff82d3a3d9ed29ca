import Foundation
import ServiceRuntime
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

/// The worker as it runs in production: separate processes in one consumer group, against the real broker and
/// real PostgreSQL. Every disturbed run must end with exactly the database of the undisturbed one.
@Suite(
    "Worker processes: faults, replay, duplicates, out-of-order", .serialized,
    .requiresKafkaAndPostgres)
struct WorkerProcessTests: ProcessSuite {
    /// A stream of realistic lifecycles with ~10 % duplicates, plus forged records, produced once; each phase
    /// reads all of it with a group and a database of its own (or, for the replay, the reference's again).
    @Test("kill -9 mid-stream, PostgreSQL stopped mid-stream, and a replay from earliest all end in the undisturbed database")
    func faults() async throws {
        let privatePostgres = try #require(PrivatePostgres(), "PIPELINE_PG_BIN is not set: run through scripts/test.sh")
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 4)

        let events = NotificationMinter.lifecycleEvents(subscriptions: 300)
        var payloads = events.map(fixture.minter.signedNotification)
        let distinct = payloads.count
        for index in stride(from: 0, to: distinct, by: 10) { payloads.append(payloads[index]) }  // ~10 % duplicates
        var forged = payloads[3]
        forged.removeLast(4)
        forged += forged.hasSuffix("AAAA") ? "BBBB" : "AAAA"
        var otherApp = fixture.minter
        otherApp.bundleId = "com.example.not.configured"
        let foreign = otherApp.signedNotification(events[5])
        payloads += [forged, foreign]
        try await fixture.produce(payloads)
        let expectedDead: [String: String] = [forged: "signatureMismatch", foreign: "bundleIdMismatch"]

        func finish(_ workers: [Process]) async { await fixture.stopOneByOne(workers) }
        func newDatabase(_ suffix: String) async throws -> String {
            try await TestDatabase.create("w" + UUID().uuidString.prefix(8).lowercased() + suffix, on: postgresURL)
        }
        /// Exactly one dead letter per forged record. A kill -9 between the broker's acknowledgement of a dead letter
        /// and its batch's commit may re-send it once (`exact: false` then counts distinct original positions,
        /// as `pipelinectl dlq list` does); everywhere else the raw count is exact.
        func checkDeadLetters(_ group: String, _ phase: String, exact: Bool = true, topic: String? = nil) async throws {
            let dead = try await fixture.deadLetters(group: group, topic: topic)
            if exact {
                #expect(dead.count == expectedDead.count, "\(phase): \(dead.count) dead letters, expected exactly \(expectedDead.count)")
            } else {
                #expect(Set(dead.compactMap(\.original)).count == expectedDead.count && dead.count <= expectedDead.count + 1, "\(phase): \(dead.count) dead letters")
            }
            #expect(Set(dead.map { String(decoding: $0.record.value, as: UTF8.self) }) == Set(expectedDead.keys), "\(phase): only the forged records are dead-lettered")
            for letter in dead { #expect(expectedDead[String(decoding: letter.record.value, as: UTF8.self)] == letter.errorCode, "\(phase): \(letter.errorCode)") }
        }

        // A. Undisturbed: the reference.
        let groupA = TestServices.uniqueName("undisturbed")
        let databaseA = try await newDatabase("a")
        var workers = [try await fixture.startWorker(group: groupA, postgresURL: databaseA).process, try await fixture.startWorker(group: groupA, postgresURL: databaseA).process]
        #expect(try await TestDatabase.waitForLedger(databaseA, count: distinct), "the undisturbed run stored every notification\n\(fixture.logTail())")
        #expect(try await fixture.waitForLag(group: groupA), "the undisturbed run committed everything\n\(fixture.logTail())")
        await finish(workers)
        let reference = try await TestDatabase.digest(databaseA)
        #expect(reference.ledger == distinct)
        try await checkDeadLetters(groupA, "undisturbed")

        // A'. Replay: the reference group back to earliest with `pipelinectl replay`, two fresh workers; the
        // database must not change (everything is a duplicate now).
        let replay = try await fixture.pipelinectl(["replay", "--group", groupA, "--topic", fixture.topic, "--to", "earliest"])
        #expect(replay.status == 0, "pipelinectl replay: \(replay.output)")
        #expect(replay.output.contains("\(payloads.count)"), "the replay announces every record to reprocess: \(replay.output)")
        #expect(try await fixture.lag(group: groupA) == Int64(payloads.count))
        workers = [try await fixture.startWorker(group: groupA, postgresURL: databaseA).process, try await fixture.startWorker(group: groupA, postgresURL: databaseA).process]
        #expect(try await fixture.waitForLag(group: groupA), "the replay was consumed to the end\n\(fixture.logTail())")
        await finish(workers)
        #expect(try await TestDatabase.digest(databaseA) == reference, "a replay changed the database")
        try await checkDeadLetters(groupA, "replay: the redelivered forged records are not dead-lettered again")

        // B. kill -9 of one worker mid-stream; a replacement joins; the group rebalances. On a topic of its own
        // that holds only the first half of the distinct notifications when the kill lands, so the kill is
        // mid-stream by construction, however fast the machine; the rest is produced after it.
        let groupB = TestServices.uniqueName("killed")
        let topicB = fixture.topic + ".b"
        try await fixture.createTopics(partitions: 4, topic: topicB)
        let databaseB = try await newDatabase("b")
        // Small batches: more of them in flight, so the kill is likely to land inside one.
        let killedAt: Int
        (workers, killedAt) = try await fixture.killOneWorkerMidStream(payloads, distinct: distinct, topic: topicB, group: groupB, database: databaseB, batchSize: 25)
        #expect(try await TestDatabase.waitForLedger(databaseB, count: distinct), "after the kill every notification was stored\n\(fixture.logTail())")
        #expect(try await fixture.waitForLag(group: groupB, topic: topicB))
        await finish(workers)
        #expect(killedAt <= distinct / 2, "only the first half was in the topic at the kill (\(killedAt) of \(distinct) stored)")
        #expect(try await TestDatabase.digest(databaseB, topicRenamed: (topicB, fixture.topic)) == reference, "kill -9 changed the outcome")
        try await checkDeadLetters(groupB, "kill -9", exact: false, topic: topicB)

        // C. PostgreSQL stopped mid-stream (immediate shutdown, as a crash), kept down while the workers retry, then
        // started again: the workers say they are not ready meanwhile, dead-letter nothing more, and finish.
        try await privatePostgres.start()
        let databaseC = try await TestDatabase.create("outage", on: privatePostgres.url)
        let groupC = TestServices.uniqueName("outage")
        let started = [try await fixture.startWorker(group: groupC, postgresURL: databaseC), try await fixture.startWorker(group: groupC, postgresURL: databaseC)]
        workers = started.map(\.process)
        #expect(try await TestDatabase.waitForLedger(databaseC, count: distinct / 10), "\(fixture.logTail())")
        try await privatePostgres.stop()
        let stoppedAt = ContinuousClock.now
        var notReady = false
        while ContinuousClock.now < stoppedAt + .seconds(20), !notReady {
            for (_, port) in started where try await HTTPTestConnection(port: port).send(method: "GET", path: OperationsRoutes.ready).status == 503 { notReady = true }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(notReady, "a worker whose database is down reports 503 on /health/ready\n\(fixture.logTail())")
        try await Task.sleep(until: stoppedAt + .seconds(8))
        #expect(workers.allSatisfy { $0.isRunning }, "the workers keep running while the database is down")
        try await privatePostgres.start()
        #expect(try await TestDatabase.waitForLedger(databaseC, count: distinct), "after the outage every notification was stored\n\(fixture.logTail())")
        #expect(try await fixture.waitForLag(group: groupC))
        await finish(workers)
        #expect(try await TestDatabase.digest(databaseC) == reference, "the database outage changed the outcome")
        try await checkDeadLetters(groupC, "database outage")
        withExtendedLifetime(privatePostgres) {}
    }

    /// Through ingest: the same notifications delivered once in order, or shuffled with duplicates and an older
    /// renewal after a newer expiry, end in the same entitlements, transactions and archive.
    @Test("duplicates and out-of-order delivery leave exactly the state of one in-order delivery")
    func duplicatesAndOutOfOrder() async throws {
        let inOrder = try WorkerProcessFixture(bootstrap: bootstrap)
        let events = NotificationMinter.lifecycleEvents(subscriptions: 40)
        let bodies = events.map { NotificationMinter.body(inOrder.minter.signedNotification($0)) }

        // Delivery 1: each once, in signedDate order per subscription.
        // Delivery 2: reversed (every older notification after its newer ones), each body two or three times.
        var disordered: [String] = []
        for (index, body) in bodies.enumerated().reversed() { disordered += Array(repeating: body, count: 2 + index % 2) }
        var digests: [DatabaseDigest] = []
        for (name, delivery) in [("ordered", bodies), ("disordered", disordered)] {
            let fixture = try WorkerProcessFixture(bootstrap: bootstrap, sharing: inOrder)
            try await fixture.createTopics(partitions: 2)
            let ingest = try await RunningIngest.start(bootstrap: bootstrap, topic: fixture.topic)
            let connection = HTTPTestConnection(port: ingest.port)
            for body in delivery {
                #expect(try await connection.send(path: "/v2/notifications", headers: jsonHeaders, body: Array(body.utf8)).status == 200)
            }
            try await ingest.stop()
            let database = try await TestDatabase.create("w" + UUID().uuidString.prefix(8).lowercased() + String(name.prefix(1)), on: postgresURL)
            let group = TestServices.uniqueName(name)
            let workers = [try await fixture.startWorker(group: group, postgresURL: database).process, try await fixture.startWorker(group: group, postgresURL: database).process]
            #expect(try await TestDatabase.waitForLedger(database, count: bodies.count), "\(name): every notification stored\n\(fixture.logTail())")
            #expect(try await fixture.waitForLag(group: group))
            await fixture.stopOneByOne(workers)
            digests.append(try await TestDatabase.digest(database))
        }
        // The archive differs by Kafka coordinates (different topics); the state must not.
        #expect(digests[0].ledger == digests[1].ledger)
        #expect(digests[0].entitlements == digests[1].entitlements, "entitlements differ: \(digests)")
        #expect(digests[0].transactions == digests[1].transactions, "transactions differ: \(digests)")
    }
}
