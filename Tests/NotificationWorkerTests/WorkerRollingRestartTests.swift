import Foundation
import NotificationWorker
import PipelineConfiguration
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

/// Static membership (`WORKER_INSTANCE_ID`) as a rolling restart uses it: each worker process stops (SIGTERM) and
/// a new process under the same name takes its place, one after the other.
@Suite("Worker processes: a rolling restart with static membership", .serialized, .requiresKafkaAndPostgres)
struct WorkerRollingRestartTests: ProcessSuite {
    @Test("each restarted worker gets exactly its partitions back, the other sees no rebalance, and every notification is stored")
    func rollingRestartMovesNothing() async throws {
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 4)
        let database = try await TestDatabase.createMigrated("rolling")
        let group = TestServices.uniqueName("rolling")
        let payloads = NotificationMinter.lifecycleEvents(subscriptions: 60).map(fixture.minter.signedNotification)
        let half = payloads.count / 2
        try await fixture.produce(payloads[..<half])
        // The session timeout bounds how long a restart may take and still keep its partitions.
        func start(_ name: String) async throws -> Process {
            try await fixture.startWorker(group: group, postgresURL: database, extra: ["WORKER_INSTANCE_ID": name, "KAFKA_CONFIG_SESSION_TIMEOUT_MS": "20000"]).process
        }
        var workers = [try await start("worker-0"), try await start("worker-1")]
        func owned() -> [Set<Int32>] { workers.map(fixture.ownedPartitions) }
        func waitUntil(_ condition: () -> Bool) async -> Bool {
            let deadline = ContinuousClock.now + .seconds(60)
            while !condition(), ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(100)) }
            return condition()
        }
        let split = await waitUntil { owned().allSatisfy { !$0.isEmpty } && owned().reduce(0) { $0 + $1.count } == 4 }
        #expect(split, "the two workers split the four partitions: \(owned())\n\(fixture.logTail())")
        #expect(try await TestDatabase.waitForLedger(database, count: half), "\(fixture.logTail())")
        let before = owned()
        #expect(before[0].isDisjoint(with: before[1]))

        for index in workers.indices {
            let other = 1 - index
            let otherHistory = fixture.rebalances(workers[other])
            await ChildProcess.terminate(workers[index])
            // At once, as a StatefulSet's rolling update replaces a pod. On the bundled broker (tansu 0.6.0) a member
            // that came back after 8 s got its partitions 39 s later, through a rebalance of the other, and the next
            // member restarted never got its own back (docs/scale.md); Apache Kafka returns a static member's
            // partitions whenever it is back within the session timeout (KIP-345).
            workers[index] = try await start("worker-\(index)")
            let back = await waitUntil { fixture.ownedPartitions(workers[index]) == before[index] }
            #expect(back, "worker-\(index) came back owning \(fixture.ownedPartitions(workers[index])), it owned \(before[index])\n\(fixture.logTail())")
            #expect(fixture.rebalances(workers[other]) == otherHistory, "worker-\(other) was rebalanced while worker-\(index) restarted")
        }
        #expect(owned() == before, "after the rolling restart every partition is where it was")

        try await fixture.produce(payloads[half...])
        #expect(try await TestDatabase.waitForLedger(database, count: payloads.count), "every notification stored after the restarts\n\(fixture.logTail())")
        #expect(try await fixture.waitForLag(group: group), "and committed")
        // Static members do not leave the group when they stop, so there is nothing to wait for between them.
        for worker in workers { await ChildProcess.terminate(worker) }
    }
}

@Suite("WORKER_INSTANCE_ID")
struct WorkerInstanceIdTests {
    func configuration(_ instance: String?) throws(ConfigurationError) -> WorkerConfiguration {
        var environment = ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092", "POSTGRES_URL": "postgres://u@127.0.0.1/db", "APPS": WorkerProcessFixture.apps]
        environment["WORKER_INSTANCE_ID"] = instance
        return try WorkerConfiguration.fromEnvironment(EnvironmentReader(environment))
    }

    @Test("it is the consumer's group.instance.id; unset or empty is dynamic membership; a name Kafka would refuse is refused at start")
    func staticMembership() throws {
        #expect(try configuration("appstore-worker-2").consumerConfiguration.groupInstanceId == "appstore-worker-2")
        #expect(try configuration(nil).consumerConfiguration.groupInstanceId == nil)
        #expect(try configuration("").consumerConfiguration.groupInstanceId == nil)
        for bad in ["worker 1", "worker/1", "wörker", String(repeating: "w", count: 250)] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try configuration(bad) }
        }
    }
}
