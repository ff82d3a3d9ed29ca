import Foundation
import KafkaClient
import Logging

/// Reads a whole topic as it is now (every partition from its first retained record to its current end), for
/// tools: `dlq list`, `dlq redrive`, tests. Uses a throwaway consumer group that never commits.
///
/// After reaching the ends the broker reported, it reads on until nothing more arrives for `settle`: the tansu
/// test broker reports the base offset of a partition's last batch as its end, so records produced together
/// (the worker sends a batch's dead letters at once) would otherwise be missed there. Kafka reports the true end.
public enum TopicReader {
    /// Every record of the topic, in memory: for tests and small topics. Tools use `forEach`.
    public static func readAll(
        _ topic: String, client: KafkaClientConfiguration, logger: Logger, timeout: Duration = .seconds(120), settle: Duration = .seconds(1),
        progress: @Sendable (Int, Int64) -> Void = { _, _ in }
    ) async throws -> [KafkaConsumerMessage] {
        var records: [KafkaConsumerMessage] = []
        try await forEach(topic, client: client, logger: logger, timeout: timeout, settle: settle, progress: progress) { records.append($0) }
        return records
    }

    /// Hands every record of the topic to `body`, one at a time, keeping none: memory stays bounded by one poll
    /// (at most 1 000 records) whatever the topic holds. `timeout` bounds the whole read.
    public static func forEach(
        _ topic: String, client: KafkaClientConfiguration, logger: Logger, timeout: Duration = .seconds(600), settle: Duration = .seconds(1),
        progress: @Sendable (Int, Int64) -> Void = { _, _ in }, _ body: (KafkaConsumerMessage) async throws -> Void
    ) async throws {
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
        guard !remaining.isEmpty else { return }

        var configuration = KafkaConsumerConfiguration(client: client, groupId: "pipelinectl-reader-\(UUID().uuidString.lowercased())")
        configuration.sessionTimeoutMilliseconds = 6_000
        configuration.heartbeatIntervalMilliseconds = 500
        configuration.autoOffsetReset = "earliest"
        configuration.maximumPrefetchKilobytes = 8 * 1024
        let consumer = try KafkaConsumer(configuration: configuration, topics: [topic], logger: logger)
        var read = 0
        var seen: [Int32: Int64] = [:]  // partition -> highest offset read
        let deadline = ContinuousClock.now + timeout
        var quietSince: ContinuousClock.Instant?
        do {
            while quietSince.map({ ContinuousClock.now - $0 < settle }) ?? true {
                guard ContinuousClock.now < deadline else { throw TopicReadError(description: "reading \(topic) timed out with \(remaining.count) partition(s) unfinished") }
                let batch = try await consumer.pollBatch(maximum: 1_000, timeoutMilliseconds: 200)
                var fresh = false
                for message in batch where message.offset > seen[message.partition, default: -1] {
                    seen[message.partition] = message.offset
                    read += 1
                    try await body(message)
                    fresh = true
                    if let last = remaining[message.partition], message.offset >= last { remaining[message.partition] = nil }
                }
                if !remaining.isEmpty || fresh { quietSince = remaining.isEmpty ? ContinuousClock.now : nil }
                progress(read, max(total, Int64(read)))
            }
        } catch {
            await consumer.close()
            throw error
        }
        await consumer.close()
    }
}

/// Reading a topic failed for a reason of its own (missing topic, timeout).
public struct TopicReadError: Error, CustomStringConvertible {
    public var description: String
}
