import Foundation
import KafkaClient
import Logging
import StoreTestSupport
import TestSupport
import Testing

/// Settings that keep group joins fast on tansu (joins take about session.timeout.ms / 2 there). Test-only.
func testConsumerConfiguration(bootstrap: String, group: String) -> KafkaConsumerConfiguration {
    var configuration = KafkaConsumerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap], clientId: group), groupId: group)
    configuration.sessionTimeoutMilliseconds = 2_000
    configuration.heartbeatIntervalMilliseconds = 300
    configuration.autoCommitIntervalMilliseconds = 200
    return configuration
}

func testProducer(bootstrap: String, deliveryTimeout: Int = 10_000, additional: [String: String] = [:], logger: Logger = testLogger) throws -> KafkaProducer {
    var configuration = KafkaProducerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap], additionalConfig: additional))
    configuration.deliveryTimeoutMilliseconds = deliveryTimeout
    configuration.flushTimeoutMilliseconds = 2_000
    return try KafkaProducer(configuration: configuration, logger: logger)
}

/// For clients whose broker is deliberately away: librdkafka reports every reconnect, which would bury the
/// test report in CI's output tail.
let quietTestLogger = quietLogger("kafka-tests", level: .critical)

let testLogger: Logger = {
    var logger = Logger(label: "kafka-tests")
    logger.logLevel = ProcessInfo.processInfo.environment["KAFKA_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
    return logger
}()

func requireKafka() throws -> String {
    try RequiredServices.bootstrap
}

/// Creates a topic with `partitions` partitions and waits until its metadata shows them.
func makeTopic(_ bootstrap: String, partitions: Int32, name: String = TestServices.uniqueName("topic")) async throws -> String {
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
func consume(
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
