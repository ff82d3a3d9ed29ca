import Foundation
import KafkaClient
import Logging

/// Reads a whole topic as it is now (every partition from its first retained record to its current end), for
/// tools: `dlq list`, `dlq redrive`, tests. Uses a throwaway consumer group that never commits.
///
/// After reaching the ends the broker reported, it reads on until nothing more arrives for `settle`: the tansu
/// test broker reports the base offset of a partition's last batch as its end, so records produced together
/// (the worker sends a batch's dead letters at once) would otherwise be missed there. Kafka reports the true end.
package enum TopicReader {
    /// Every record of the topic, in memory: for tests and small topics. Tools use `forEach`.
    package static func readAll(
        _ topic: String, client: KafkaClientConfiguration, logger: Logger, since: Int64? = nil, sinceMargin: Int64 = 300_000, timeout: Duration = .seconds(120),
        settle: Duration = .seconds(1), progress: @Sendable (Int, Int64) -> Void = { _, _ in }
    ) async throws -> [KafkaConsumerMessage] {
        var records: [KafkaConsumerMessage] = []
        try await forEach(topic, client: client, logger: logger, since: since, sinceMargin: sinceMargin, timeout: timeout, settle: settle, progress: progress) {
            records.append($0)
        }
        return records
    }

    /// Hands every record of the topic to `body`, one at a time, keeping none: memory stays bounded by one poll
    /// (at most 1 000 records) whatever the topic holds. `timeout` bounds the whole read.
    ///
    /// With `since` (ms), each partition is read from the first record stamped at or after `since − sinceMargin`
    /// (found by a binary search over record timestamps, which works on every broker): `dlq list --since` and
    /// `dlq redrive --since` then fetch what they need, not the whole retention. The margin covers producers
    /// whose clocks disagree a little; callers still filter by their own time, so starting early is harmless.
    ///
    /// With `follow`, it does not stop at the end: it goes on handing over new records until the task is
    /// cancelled (`timeout` then does not apply).
    package static func forEach(
        _ topic: String, client: KafkaClientConfiguration, logger: Logger, since: Int64? = nil, sinceMargin: Int64 = 300_000,
        timeout: Duration = .seconds(600), settle: Duration = .seconds(1), follow: Bool = false,
        progress: @Sendable (Int, Int64) -> Void = { _, _ in }, _ body: (KafkaConsumerMessage) async throws -> Void
    ) async throws {
        let admin = try KafkaAdminClient(configuration: client, logger: logger)
        let partitionCount = try await admin.listTopics()[topic] ?? 0
        guard partitionCount > 0 else {
            await admin.close()
            throw TopicReadError(description: "topic \(topic) does not exist")
        }
        let partitions = (0..<Int32(partitionCount)).map { KafkaTopicPartition(topic: topic, partition: $0) }
        var starts: [Int32: Int64] = [:]  // partition -> first offset to read, where that is past the low watermark
        if let since {
            do {
                for (partition, offset) in try await admin.offsets(for: partitions, at: since - sinceMargin, lookup: .scan) { starts[partition.partition] = offset }
            } catch {
                await admin.close()
                throw error
            }
        }
        var remaining: [Int32: Int64] = [:]  // partition -> last offset to read
        var total: Int64 = 0
        for partition in partitions {
            let marks = try await admin.watermarks(partition)
            let first = max(marks.low, starts[partition.partition] ?? marks.low)
            if first > marks.low { starts[partition.partition] = first } else { starts[partition.partition] = nil }
            if marks.high > first {
                remaining[partition.partition] = marks.high - 1
                total += marks.high - first
            }
        }
        await admin.close()
        guard !remaining.isEmpty || follow else { return }

        var configuration = KafkaConsumerConfiguration(client: client, groupId: "pipelinectl-reader-\(UUID().uuidString.lowercased())")
        configuration.sessionTimeoutMilliseconds = 6_000
        configuration.heartbeatIntervalMilliseconds = 500
        configuration.autoOffsetReset = "earliest"
        configuration.maximumPrefetchKilobytes = 8 * 1024
        let consumer = try KafkaConsumer(configuration: configuration, topics: [topic], logger: logger)
        var read = 0
        var seen: [Int32: Int64] = [:]  // partition -> highest offset read
        // Partitions to move past their start once assigned (a seek needs the assignment).
        var toSeek = starts.filter { remaining[$0.key] != nil }
        let deadline = ContinuousClock.now + timeout
        var quietSince: ContinuousClock.Instant?
        do {
            while follow ? !Task.isCancelled : quietSince.map({ ContinuousClock.now - $0 < settle }) ?? true {
                guard follow || ContinuousClock.now < deadline else { throw TopicReadError(description: "reading \(topic) timed out with \(remaining.count) partition(s) unfinished") }
                let batch = try await consumer.pollBatch(maximum: 1_000, timeoutMilliseconds: 200)
                if !toSeek.isEmpty {
                    let assigned = Set(try await consumer.assignment().map(\.partition))
                    for (partition, offset) in toSeek where assigned.contains(partition) {
                        // Should a seek fail, the records before the start are still skipped below, only fetched.
                        do {
                            try await consumer.seek(KafkaTopicPartition(topic: topic, partition: partition), to: offset)
                        } catch {
                            logger.notice("seek failed; reading from the partition's start instead", metadata: ["partition": "\(partition)", "error": "\(error)"])
                        }
                        toSeek[partition] = nil
                    }
                }
                var fresh = false
                for message in batch where message.offset > seen[message.partition, default: -1] && message.offset >= starts[message.partition, default: 0] {
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
package struct TopicReadError: Error, CustomStringConvertible {
    package var description: String
}
