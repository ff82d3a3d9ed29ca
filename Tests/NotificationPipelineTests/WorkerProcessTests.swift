import AppStoreNotifications
import Foundation
import KafkaClient
import NotificationPipeline
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The worker as it runs in production: separate processes in one consumer group, against the real broker and
/// real PostgreSQL. Every disturbed run must end with exactly the database of the undisturbed one.
@Suite(
    "Worker processes: kill -9, duplicates and out-of-order", .serialized,
    .enabled(if: TestServices.runKafkaSuites && TestServices.runPostgresSuites, Comment(rawValue: TestServices.missingKafka)))
struct WorkerProcessTests {
    /// A stream of realistic lifecycles with ~10 % duplicates, plus forged records, produced once; each phase
    /// reads all of it with a group and a database of its own.
    @Test("crash (kill -9) mid-stream ends in the undisturbed database")
    func faults() async throws {
        let bootstrap = try #require(TestServices.kafkaBootstrapServers, Comment(rawValue: TestServices.missingKafka))
        let postgresURL = try #require(TestServices.postgresURL, Comment(rawValue: TestServices.missingPostgres))
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 4)

        let events = NotificationMinter.lifecycleEvents(subscriptions: 250)
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

        func finish(_ workers: [Process]) { for worker in workers { ChildProcess.terminate(worker) } }

        // A. Undisturbed: the reference.
        let groupA = TestServices.uniqueName("undisturbed")
        let databaseA = try await TestDatabase.create("w" + UUID().uuidString.prefix(8).lowercased() + "a", on: postgresURL)
        var workers = [try fixture.startWorker(group: groupA, postgresURL: databaseA).process, try fixture.startWorker(group: groupA, postgresURL: databaseA).process]
        #expect(try await TestDatabase.waitForLedger(databaseA, count: distinct), "the undisturbed run stored every notification")
        try await Task.sleep(for: .seconds(1))
        finish(workers)
        let reference = try await TestDatabase.digest(databaseA)
        #expect(reference.ledger == distinct)
        let deadA = try await fixture.deadLetters(group: groupA)
        #expect(Set(deadA.map { String(decoding: $0.record.value, as: UTF8.self) }) == Set(expectedDead.keys))
        for letter in deadA { #expect(expectedDead[String(decoding: letter.record.value, as: UTF8.self)] == letter.errorCode) }

        // B. kill -9 of one worker mid-stream; a replacement joins; the group rebalances.
        let groupB = TestServices.uniqueName("killed")
        let databaseB = try await TestDatabase.create("w" + UUID().uuidString.prefix(8).lowercased() + "b", on: postgresURL)
        workers = [try fixture.startWorker(group: groupB, postgresURL: databaseB).process, try fixture.startWorker(group: groupB, postgresURL: databaseB).process]
        #expect(try await TestDatabase.waitForLedger(databaseB, count: distinct / 4))
        ChildProcess.kill(workers[0])
        let killedAt = await TestDatabase.ledgerCount(databaseB)
        workers[0] = try fixture.startWorker(group: groupB, postgresURL: databaseB).process
        #expect(try await TestDatabase.waitForLedger(databaseB, count: distinct), "after the kill every notification was stored")
        try await Task.sleep(for: .seconds(1))
        finish(workers)
        #expect(killedAt < distinct, "the kill happened mid-stream (\(killedAt) of \(distinct) stored)")
        #expect(try await TestDatabase.digest(databaseB) == reference, "kill -9 changed the outcome")
        let deadB = try await fixture.deadLetters(group: groupB)
        #expect(Set(deadB.map { String(decoding: $0.record.value, as: UTF8.self) }) == Set(expectedDead.keys), "only the forged records are dead-lettered")
    }

    /// Through ingest: the same notifications delivered once in order, or shuffled with duplicates and an older
    /// renewal after a newer expiry, end in the same entitlements, transactions and archive.
    @Test("duplicates and out-of-order delivery leave exactly the state of one in-order delivery")
    func duplicatesAndOutOfOrder() async throws {
        let bootstrap = try #require(TestServices.kafkaBootstrapServers, Comment(rawValue: TestServices.missingKafka))
        let postgresURL = try #require(TestServices.postgresURL, Comment(rawValue: TestServices.missingPostgres))
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
            let workers = [try fixture.startWorker(group: group, postgresURL: database).process, try fixture.startWorker(group: group, postgresURL: database).process]
            #expect(try await TestDatabase.waitForLedger(database, count: bodies.count), "\(name): every notification stored")
            try await Task.sleep(for: .seconds(1))
            for worker in workers { ChildProcess.terminate(worker) }
            digests.append(try await TestDatabase.digest(database))
        }
        // The archive differs by Kafka coordinates (different topics); the state must not.
        #expect(digests[0].ledger == digests[1].ledger)
        #expect(digests[0].entitlements == digests[1].entitlements, "entitlements differ: \(digests)")
        #expect(digests[0].transactions == digests[1].transactions, "transactions differ: \(digests)")
    }
}
