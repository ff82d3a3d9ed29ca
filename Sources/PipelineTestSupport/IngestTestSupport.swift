import AppStoreNotifications
import Foundation
import KafkaClient
import Logging
import NotificationIngest
import ServiceRuntime
import Prometheus
import ServiceLifecycle
import TestSupport
import Testing

package let ingestTestLogger = quietLogger("ingest-tests")

/// An ingest application running in this process on a free port, in a real ServiceGroup.
package struct RunningIngest: Sendable {
    package let port: Int
    package let topic: String
    package let producer: KafkaProducer
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    package static func start(
        bootstrap: String, topic: String = TestServices.uniqueName("notifications"), drain: ShutdownDrain? = nil, configure: (inout IngestConfiguration) -> Void = { _ in }
    ) async throws -> RunningIngest {
        var configuration = IngestConfiguration(
            kafka: KafkaClientConfigurationValues(bootstrapServers: [bootstrap], clientId: "ingest-test", statisticsIntervalMilliseconds: 0, additionalConfig: [:]))
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.topic = topic
        configuration.instanceId = "ingest-test"
        configure(&configuration)
        let producer = try KafkaProducer(configuration: configuration.producerConfiguration, logger: ingestTestLogger)
        let (ports, portContinuation) = AsyncStream<Int>.makeStream()
        let application = buildIngestApplication(
            configuration: configuration, producer: producer, registry: PrometheusCollectorRegistry(), logger: ingestTestLogger, drain: drain,
            onServerRunning: { port in portContinuation.yield(port) })
        let services: [any Service] = drain.map { [application, $0] } ?? [application]
        let group = ServiceGroup(configuration: .init(services: services, logger: ingestTestLogger))
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw HTTPTestConnection.Failure(description: "ingest did not start") }
        return RunningIngest(port: port, topic: topic, producer: producer, group: group, task: task)
    }

    /// Graceful shutdown: the server drains, then the producer flushes.
    package func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }

    /// Starts a graceful shutdown without waiting for it.
    package func beginShutdown() async {
        await group.triggerGracefulShutdown()
    }
}

/// The body Apple would POST for `signedPayload`.
package func notificationBody(_ signedPayload: String) -> [UInt8] {
    Array(JSONObject(["signedPayload": .string(signedPayload)]).serialized.utf8)
}

package let jsonHeaders = ["Content-Type": "application/json"]

/// Reads `topic` from the beginning until `count` records arrived or `timeout` passed.
package func readTopic(_ bootstrap: String, topic: String, atLeast count: Int, timeout: Duration = .seconds(60)) async throws -> [KafkaConsumerMessage] {
    var configuration = KafkaConsumerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap]), groupId: TestServices.uniqueName("reader"))
    configuration.sessionTimeoutMilliseconds = 2_000
    configuration.heartbeatIntervalMilliseconds = 300
    let consumer = try KafkaConsumer(configuration: configuration, topics: [topic], logger: ingestTestLogger)
    var records: [KafkaConsumerMessage] = []
    let deadline = ContinuousClock.now + timeout
    while records.count < count, ContinuousClock.now < deadline {
        records += try await consumer.pollBatch(maximum: 1_000, timeoutMilliseconds: 200)
    }
    // A little longer, to catch anything beyond the expected count (duplicates).
    let settle = ContinuousClock.now + .seconds(1)
    while ContinuousClock.now < settle { records += try await consumer.pollBatch(maximum: 1_000, timeoutMilliseconds: 200) }
    await consumer.close()
    return records
}

/// The repository root (for the built executables).
package let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// The shared vectors directory (`$PIPELINE_SHARED_DIR/vectors` or `../shared/vectors`).
package let sharedVectors: URL = {
    if let path = ProcessInfo.processInfo.environment["PIPELINE_SHARED_DIR"] { return URL(fileURLWithPath: path).appendingPathComponent("vectors") }
    return repositoryRoot.deletingLastPathComponent().appendingPathComponent("shared/vectors")
}()
