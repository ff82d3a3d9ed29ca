import Foundation
import KafkaClient
import Logging

/// Reads a whole topic as it is now (every partition from its first retained record to its current end), for
/// tools: `dlq list`, `dlq redrive`, tests. Uses a throwaway consumer group that never commits.
public enum TopicReader {
    public static func readAll(
        _ topic: String, client: KafkaClientConfiguration, logger: Logger, timeout: Duration = .seconds(120),
        progress: @Sendable (Int, Int64) -> Void = { _, _ in }
    ) async throws -> [KafkaConsumerMessage] {
        let admin = try KafkaAdminClient(configuration: client, logger: logger)
        let partitionCount = try await admin.listTopics()[topic] ?? 0
        guard partitionCount > 0 else {
            await admin.close()
            throw TopicReadError(description: "topic \(topic) does not exist")
        }
        var remaining: [Int32: Int64] = [:]  // partition -> last offset to read
        var total: Int64 = 0
        for partition in 0..<Int32(partitionCount) {
            let marks = try await admin.watermarks(KafkaTopicPartition(topic: topic, partition: partition))
            if marks.high > marks.low {
                remaining[partition] = marks.high - 1
                total += marks.high - marks.low
            }
        }
        await admin.close()
        guard !remaining.isEmpty else { return [] }

        var configuration = KafkaConsumerConfiguration(client: client, groupId: "pipelinectl-reader-\(UUID().uuidString.lowercased())")
        configuration.sessionTimeoutMilliseconds = 6_000
        configuration.heartbeatIntervalMilliseconds = 500
        configuration.autoOffsetReset = "earliest"
        let consumer = try KafkaConsumer(configuration: configuration, topics: [topic], logger: logger)
        var records: [KafkaConsumerMessage] = []
        let deadline = ContinuousClock.now + timeout
        do {
            while !remaining.isEmpty {
                guard ContinuousClock.now < deadline else { throw TopicReadError(description: "reading \(topic) timed out with \(remaining.count) partition(s) unfinished") }
                for message in try await consumer.pollBatch(maximum: 1_000, timeoutMilliseconds: 200) {
                    guard let last = remaining[message.partition], message.offset <= last else { continue }
                    records.append(message)
                    if message.offset == last { remaining[message.partition] = nil }
                }
                progress(records.count, total)
            }
        } catch {
            await consumer.close()
            throw error
        }
        await consumer.close()
        return records
    }
}

/// Reading a topic failed for a reason of its own (missing topic, timeout).
public struct TopicReadError: Error, CustomStringConvertible {
    public var description: String
}
