import CRDKafka
import Logging

extension KafkaAdminClient {
    /// How to find the first offset at or after a point in time.
    public enum TimestampLookup: String, Sendable, CaseIterable {
        /// The broker's time index (ListOffsets, Kafka's offsetsForTimes). Exact and cheap on Apache Kafka.
        case broker
        /// A binary search over the records' own timestamps with ordinary fetches: about log2(records) fetches
        /// per partition, for brokers without a time index (tansu answers 0, librdkafka's mock the end).
        /// Assumes timestamps grow with offsets, as log-append time or ingest's received-at do.
        case scan
    }

    /// The first offset per partition whose record timestamp is at or after `timestamp` (ms), found by `lookup`.
    public func offsets(for partitions: [KafkaTopicPartition], at timestamp: Int64, lookup: TimestampLookup) async throws(KafkaError) -> [KafkaTopicPartition: Int64] {
        switch lookup {
        case .broker:
            return try await offsets(for: partitions, at: timestamp)
        case .scan:
            var result: [KafkaTopicPartition: Int64] = [:]
            let reader = try RDKafkaClient(
                type: RD_KAFKA_CONSUMER, properties: scanProperties, context: RDKafkaCallbackContext(logger: client.context.logger, metricsLabel: "scan"))
            for partition in partitions {
                let (low, high) = try await watermarks(partition)
                var lower = low
                var upper = high
                while lower < upper {
                    let middle = lower + (upper - lower) / 2
                    guard let (offset, recordTime) = try await Self.record(at: middle, of: partition, reader: reader, timeout: timeoutMilliseconds) else {
                        upper = middle  // nothing readable from here on
                        continue
                    }
                    if recordTime < timestamp { lower = offset + 1 } else { upper = middle }
                }
                result[partition] = lower
            }
            await reader.destroy()
            return result
        }
    }

    var scanProperties: [String: String] {
        let scan = [
            "bootstrap.servers": bootstrapServers,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            // Required by librdkafka for a consumer handle; never joined, nothing committed (assign only).
            "group.id": "pipeline-timestamp-scan",
        ]
        return scanAdditionalConfig.merging(scan) { _, scanValue in scanValue }
    }

    /// The first record at or after `offset` (its offset and timestamp), nil at the end of the partition.
    static func record(at offset: Int64, of partition: KafkaTopicPartition, reader: RDKafkaClient, timeout: Int32) async throws(KafkaError) -> (Int64, Int64)? {
        let result: Result<(Int64, Int64)?, KafkaError> = await reader.blocking { handle in
            let list = [partition].makeList(offsets: [partition: offset])
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let assigned = rd_kafka_assign(handle, list)
            guard assigned == RD_KAFKA_RESP_ERR_NO_ERROR else { return .failure(KafkaError(assigned)) }
            defer { _ = rd_kafka_assign(handle, nil) }
            var waited: Int32 = 0
            while waited < timeout {
                guard let message = rd_kafka_consumer_poll(handle, 100) else {
                    waited += 100
                    continue
                }
                defer { rd_kafka_message_destroy(message) }
                if message.pointee.err == RD_KAFKA_RESP_ERR__PARTITION_EOF { return .success(nil) }
                guard message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR else {
                    let error = KafkaError(message.pointee.err)
                    if error.isRetriable { continue }
                    return .failure(error)
                }
                var type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
                let timestamp = rd_kafka_message_timestamp(message, &type)
                return .success((message.pointee.offset, timestamp))
            }
            return .failure(KafkaError(RD_KAFKA_RESP_ERR__TIMED_OUT, message: "no record of \(partition) at \(offset) within \(timeout) ms"))
        }
        return try result.get()
    }
}
