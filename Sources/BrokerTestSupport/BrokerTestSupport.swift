// The broker tier of the test support: what a test of a Kafka client needs, a real broker and nothing else (no
// database, no process of ours). Store tests use StoreTestSupport, process tests PipelineTestSupport.
import Foundation
import KafkaClient
import Logging
import TestSupport
import Testing
import TestGates

/// Settings that keep group joins fast on tansu (joins take about session.timeout.ms / 2 there). Test-only.
package func testConsumerConfiguration(bootstrap: String, group: String) -> KafkaConsumerConfiguration {
    var configuration = KafkaConsumerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap], clientId: group), groupId: group)
    configuration.sessionTimeoutMilliseconds = 2_000
    configuration.heartbeatIntervalMilliseconds = 300
    configuration.autoCommitIntervalMilliseconds = 200
    return configuration
}

package func testProducer(bootstrap: String, deliveryTimeout: Int = 10_000, additional: [String: String] = [:], logger: Logger = testLogger) throws -> KafkaProducer {
    var configuration = KafkaProducerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap], additionalConfig: additional))
    configuration.deliveryTimeoutMilliseconds = deliveryTimeout
    configuration.flushTimeoutMilliseconds = 2_000
    return try KafkaProducer(configuration: configuration, logger: logger)
}

/// For clients whose broker is deliberately away: librdkafka reports every reconnect, which would bury the
/// test report in CI's output tail.
package let quietTestLogger = quietLogger("kafka-tests", level: .critical)

package let testLogger: Logger = {
    var logger = Logger(label: "kafka-tests")
    logger.logLevel = ProcessInfo.processInfo.environment["KAFKA_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
    return logger
}()

/// Creates a topic with `partitions` partitions and waits until its metadata shows them.
package func makeTopic(_ bootstrap: String, partitions: Int32, name: String = TestServices.uniqueName("topic")) async throws -> String {
    let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: testLogger)
    _ = try await admin.createTopics([.init(name: name, partitions: partitions)])
    for _ in 0..<50 {
        if try await admin.listTopics()[name] == Int(partitions) { break }
        try await Task.sleep(for: .milliseconds(100))
    }
    await admin.close()
    return name
}

/// Consumes until `predicate` holds for what was collected, or `timeout` passes.
package func consume(
    _ consumer: KafkaConsumer, timeout: Duration = .seconds(30), store: Bool = true,
    until predicate: ([KafkaConsumerMessage]) -> Bool
) async throws -> [KafkaConsumerMessage] {
    var collected: [KafkaConsumerMessage] = []
    let deadline = ContinuousClock.now + timeout
    while !predicate(collected), ContinuousClock.now < deadline {
        if let message = try await consumer.poll(timeoutMilliseconds: 100) {
            collected.append(message)
            if store { try consumer.storeOffset(message) }
        }
    }
    return collected
}

/// A topic of its own for the test, created on the test broker before it runs (`.freshTopic(partitions:)`), with
/// a producer for it: the broker tier's scoped resource, as `.migratedDatabase` is the store tier's.
package struct TestTopic: Sendable {
    package let bootstrap: String
    package let name: String
    /// A unique consumer group name for the test.
    package let group: String

    /// The topic of the running test (set by the `.freshTopic` trait).
    @TaskLocal package static var current: TestTopic?

    /// The running test's topic: fails the test when it has no `.freshTopic` trait.
    package static var required: TestTopic {
        get throws { try #require(current, "the test needs the .freshTopic(partitions:) trait") }
    }

    /// A producer to the broker, closed by the caller.
    package func producer(deliveryTimeout: Int = 10_000) throws -> KafkaProducer {
        try testProducer(bootstrap: bootstrap, deliveryTimeout: deliveryTimeout)
    }
}

/// Creates a topic of `partitions` partitions for each test it is applied to (or each test of a suite) and
/// provides it as `TestTopic.current`.
package struct FreshTopicTrait: PerTestResourceTrait {
    let partitions: Int32

    package func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let bootstrap = try RequiredServices.bootstrap
        let topic = TestTopic(bootstrap: bootstrap, name: try await makeTopic(bootstrap, partitions: partitions), group: TestServices.uniqueName("group"))
        try await TestTopic.$current.withValue(topic) { try await function() }
    }
}

extension Trait where Self == FreshTopicTrait {
    /// A topic of its own, of `partitions` partitions, for the test: `TestTopic.current`.
    package static func freshTopic(partitions: Int32) -> Self { FreshTopicTrait(partitions: partitions) }
}
