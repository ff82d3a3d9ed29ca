import Foundation
import PipelineTestSupport
import PostgresNIO
import TestSupport
import Testing
import TestGates

/// A worker with VERIFY_ONLINE_CHECKS against an OCSP responder on loopback: a record waits (not ready, not
/// dead-lettered, counted) while the responder is down and is applied once it answers; a revoked leaf is dead-lettered
/// with its code.
@Suite("Worker: online revocation checks against a local OCSP responder", .serialized, .requiresKafkaAndPostgres)
struct OnlineRevocationProcessTests: ProcessSuite {
    @Test("responder down: the record waits, the worker says why and counts it, nothing is dead-lettered; up: applied; a revoked leaf: dead-lettered certificateRevoked")
    func onlineChecks() async throws {
        let responder = TestOCSPResponder()
        let uri = try await responder.serve()
        var options = TestCertificateAuthority.Options()
        options.ocspURI = uri
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap, chainOptions: options)
        let authority = try #require(fixture.authority)
        responder.setIssuers([(authority.rootCertificate, authority.rootKey), (fixture.minter.chain.intermediate, try #require(fixture.minter.chain.intermediateKey))])
        try await fixture.createTopics(partitions: 2)
        let database = try await TestDatabase.create("o" + UUID().uuidString.prefix(8).lowercased(), on: postgresURL)
        let group = TestServices.uniqueName("ocsp")
        responder.setDown(true)
        let (worker, port) = try await fixture.startWorker(
            group: group, postgresURL: database, extra: ["VERIFY_ONLINE_CHECKS": "true", "WORKER_MAX_BACKOFF_MS": "400", "VERIFY_ONLINE_TIMEOUT_MS": "1000"])

        let event = NotificationMinter.SubscriptionEvent.sample(seed: 41)
        try await fixture.produce([fixture.minter.signedNotification(event)], partition: 0)
        // A chain that names no responder (nothing to ask): its record behind the waiting one in partition 0 waits with
        // it (order holds); its records in partition 1 are applied while partition 0 waits.
        let plain = NotificationMinter(chain: try authority.issueChain())
        let behind = NotificationMinter.SubscriptionEvent.sample(seed: 141)
        let others = [NotificationMinter.SubscriptionEvent.sample(seed: 241), NotificationMinter.SubscriptionEvent.sample(seed: 341)]
        try await fixture.produce([plain.signedNotification(behind)], partition: 0)
        try await fixture.produce(others.map { plain.signedNotification($0) }, partition: 1)
        var waits = 0.0
        var ready = 0
        for _ in 0..<100 where waits < 3 {
            try await Task.sleep(for: .milliseconds(200))
            let metrics = (try? await HTTPTestConnection(port: port).send(method: "GET", path: "/metrics").bodyText) ?? ""
            waits = metrics.split(separator: "\n").first { $0.hasPrefix("worker_revocation_check_waits_total") }.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) } ?? 0
        }
        #expect(waits >= 3, "the record was verified again while the responder was down\n\(fixture.logTail())")
        let readiness = try await HTTPTestConnection(port: port).send(method: "GET", path: "/health/ready")
        ready = readiness.status
        #expect(ready == 503 && readiness.bodyText.contains("OCSP"), "not ready, saying why: \(readiness.bodyText)")
        #expect(try await TestDatabase.waitForLedger(database, count: 2, timeout: .seconds(30)), "partition 1 goes on while partition 0 waits\n\(fixture.logTail())")
        let stored = try await TestDatabase.with(database) { client in
            var uuids: Set<String> = []
            for try await uuid in try await client.query("SELECT notification_uuid FROM notification_ledger", logger: ingestTestLogger).decode(String.self) { uuids.insert(uuid) }
            return uuids
        }
        #expect(stored == Set(others.map(\.notificationUUID)), "nothing accepted unchecked, nothing overtakes the waiting record in its partition: \(stored)")
        #expect(try await TestDatabase.with(database) { client in
            var count = 0
            for try await value in try await client.query("SELECT count(*)::int FROM dead_lettered_records", logger: ingestTestLogger).decode(Int.self) { count = value }
            return count
        } == 0, "nothing dead-lettered for an unavailable check")

        responder.setDown(false)
        #expect(try await TestDatabase.waitForLedger(database, count: 4, timeout: .seconds(60)), "applied once the responder answers\n\(fixture.logTail())")
        #expect(try await HTTPTestConnection(port: port).send(method: "GET", path: "/health/ready").status == 200)

        // Another leaf of the same authority, revoked: dead-lettered with its code.
        let revokedChain = try authority.issueChain(options)
        responder.setIssuers([
            (authority.rootCertificate, authority.rootKey), (fixture.minter.chain.intermediate, try #require(fixture.minter.chain.intermediateKey)),
            (revokedChain.intermediate, try #require(revokedChain.intermediateKey)),
        ])
        responder.revoke(revokedChain.leaf)
        var revokedEvent = NotificationMinter.SubscriptionEvent.sample(seed: 42)
        revokedEvent.notificationUUID = UUID().uuidString.lowercased()
        try await fixture.produce([NotificationMinter(chain: revokedChain).signedNotification(revokedEvent)])
        var codes: [String] = []
        for _ in 0..<150 where codes.isEmpty {
            try await Task.sleep(for: .milliseconds(200))
            codes = try await TestDatabase.with(database) { client in
                var codes: [String] = []
                for try await code in try await client.query("SELECT error_code FROM dead_lettered_records", logger: ingestTestLogger).decode(String.self) { codes.append(code) }
                return codes
            }
        }
        #expect(codes == ["certificateRevoked"], "\(fixture.logTail())")
        await ChildProcess.terminate(worker)
        await responder.stop()
    }
}
