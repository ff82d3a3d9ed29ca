import Foundation
@_spi(Testing) import KafkaClient
import ServiceRuntime
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

@Suite(
    "Worker process: a fatal consumer error ends the process", .serialized,
    .requiresPostgres)
struct WorkerFatalErrorTests {
    /// A static member (`group.instance.id`) that the coordinator fences: librdkafka raises a fatal consumer
    /// error. The tansu test broker has no static membership, so librdkafka's mock cluster (started in this
    /// process, reached by the worker process over TCP) answers its heartbeats with FENCED_INSTANCE_ID. The worker
    /// must not keep running while it says ready: it exits non-zero, so the orchestrator replaces it.
    @Test("a fenced static member exits non-zero, with the reason in its log")
    func fencedStaticMember() async throws {
        let postgresURL = try RequiredServices.postgresURL
        var configuration = KafkaProducerConfiguration(client: KafkaClientConfiguration(bootstrapServers: ["unused:9092"], additionalConfig: ["test.mock.num.brokers": "1"]))
        configuration.deliveryTimeoutMilliseconds = 5_000
        let cluster = try KafkaProducer(configuration: configuration, logger: ingestTestLogger)
        let bootstrap = try #require(cluster.mockBootstrapServers)
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        _ = try await cluster.sendAndAwait(KafkaProducerMessage(topic: fixture.topic, value: Array("not a notification".utf8)))  // creates the topic
        let database = try await TestDatabase.create("f" + UUID().uuidString.prefix(8).lowercased(), on: postgresURL)
        let group = TestServices.uniqueName("fenced")
        let (worker, _) = try await fixture.startWorker(group: group, postgresURL: database, extra: [
            "KAFKA_CONFIG_GROUP_INSTANCE_ID": "worker-static-1",
            // The mock delays a group's first join by 3 s: a session must outlast it.
            "KAFKA_CONFIG_SESSION_TIMEOUT_MS": "6000", "KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS": "500",
        ])
        // Killed on every way out: a worker left running against the closed mock cluster spins for good.
        do {
            try await Self.expectFatalExit(worker, fixture: fixture, cluster: cluster)
        } catch {
            Issue.record(error)
        }
        await ChildProcess.kill(worker)
        await cluster.close()
    }

    static func expectFatalExit(_ worker: Process, fixture: WorkerProcessFixture, cluster: KafkaProducer) async throws {
        let joined = ContinuousClock.now + .seconds(30)
        while fixture.assignmentCount(worker) == 0, worker.isRunning, ContinuousClock.now < joined { try await Task.sleep(for: .milliseconds(100)) }
        #expect(fixture.assignmentCount(worker) > 0, "the worker joined the mock cluster's group\n\(fixture.logTail())")

        // 82 = FENCED_INSTANCE_ID, on Heartbeat (API key 12).
        #expect(cluster.injectMockErrors(apiKey: 12, codes: Array(repeating: 82, count: 20)))
        let deadline = ContinuousClock.now + .seconds(60)
        while worker.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(!worker.isRunning, "the fenced worker kept running\n\(fixture.logTail(lines: 40))")
        if !worker.isRunning { #expect(worker.terminationStatus != 0, "exit status \(worker.terminationStatus)") }
        #expect(fixture.logTail(lines: 5_000).lowercased().contains("fatal consumer error"), "the fatal error is logged (searched in the whole log: a cancellation that overran prints a backtrace after it)\n\(fixture.logTail(lines: 40))")
    }
}
