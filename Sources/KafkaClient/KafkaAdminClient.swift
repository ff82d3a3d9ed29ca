import CRDKafka

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging

/// The operations tools need: topics, groups, committed offsets, lag, and moving a group's offsets (replay).
///
/// Every call is one librdkafka admin or metadata request, run on the client's blocking queue and bounded by
/// `timeoutMilliseconds`. Moving offsets is refused while the group has members: a live member would overwrite
/// the new offsets with its own on its next commit, so the reset would silently not happen.
public final class KafkaAdminClient: Sendable {
    let client: RDKafkaClient
    let bootstrapServers: String
    /// Security and other settings, reused by the timestamp scan's reader.
    let scanAdditionalConfig: [String: String]
    public let timeoutMilliseconds: Int32

    public init(configuration: KafkaClientConfiguration, logger: Logger, timeoutMilliseconds: Int32 = 10_000) throws(KafkaError) {
        let properties = configuration.properties.merging(configuration.additionalConfig) { _, additional in additional }
        client = try RDKafkaClient(type: RD_KAFKA_PRODUCER, properties: properties, context: RDKafkaCallbackContext(logger: logger, metricsLabel: "admin"))
        self.bootstrapServers = properties["bootstrap.servers"] ?? ""
        self.scanAdditionalConfig = configuration.additionalConfig
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    public func close() async { await client.destroy() }

    // MARK: Topics

    /// A topic to create.
    public struct TopicSpecification: Sendable, Hashable {
        public var name: String
        public var partitions: Int32
        public var replicationFactor: Int32
        /// Topic-level settings, e.g. `retention.ms`.
        public var config: [String: String]

        public init(name: String, partitions: Int32, replicationFactor: Int32 = 1, config: [String: String] = [:]) {
            self.name = name
            self.partitions = partitions
            self.replicationFactor = replicationFactor
            self.config = config
        }
    }

    public enum TopicCreation: Sendable, Hashable {
        case created
        case alreadyExists
    }

    /// Creates the topics that do not exist yet; existing ones are reported, not changed.
    public func createTopics(_ topics: [TopicSpecification]) async throws(KafkaError) -> [String: TopicCreation] {
        let timeout = timeoutMilliseconds
        let result: Result<[String: TopicCreation], KafkaError> = await client.blocking { handle in
            var errorText = [CChar](repeating: 0, count: 512)
            var newTopics: [OpaquePointer?] = []
            defer { for topic in newTopics { rd_kafka_NewTopic_destroy(topic) } }
            for topic in topics {
                guard let newTopic = rd_kafka_NewTopic_new(topic.name, topic.partitions, topic.replicationFactor, &errorText, errorText.count) else {
                    return .failure(.client("topic \(topic.name): \(String(nulTerminated: errorText))"))
                }
                for (key, value) in topic.config { rd_kafka_NewTopic_set_config(newTopic, key, value) }
                newTopics.append(newTopic)
            }
            return KafkaAdminClient.request(handle, timeout: timeout, operation: RD_KAFKA_ADMIN_OP_CREATETOPICS) { handle, options, queue in
                newTopics.withUnsafeMutableBufferPointer { rd_kafka_CreateTopics(handle, $0.baseAddress, $0.count, options, queue) }
            } read: { event in
                var count = 0
                guard let results = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(event), &count) else {
                    return .failure(.client("no CreateTopics result"))
                }
                var outcome: [String: TopicCreation] = [:]
                for index in 0..<count {
                    let topicResult = results[index]
                    let name = String(cString: rd_kafka_topic_result_name(topicResult))
                    let error = rd_kafka_topic_result_error(topicResult)
                    switch error {
                    case RD_KAFKA_RESP_ERR_NO_ERROR: outcome[name] = .created
                    case RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS: outcome[name] = .alreadyExists
                    default:
                        let message = rd_kafka_topic_result_error_string(topicResult).map { String(cString: $0) }
                        return .failure(KafkaError(error, message: "creating \(name) failed: \(message ?? "")"))
                    }
                }
                return .success(outcome)
            }
        }
        return try result.get()
    }

    /// Topics and their partition counts.
    public func listTopics() async throws(KafkaError) -> [String: Int] {
        try await client.metadata(timeoutMilliseconds: timeoutMilliseconds)
    }

    // MARK: Offsets

    /// The low (earliest) and high (next to be written) offsets of a partition.
    public func watermarks(_ partition: KafkaTopicPartition) async throws(KafkaError) -> (low: Int64, high: Int64) {
        let timeout = timeoutMilliseconds
        let result: Result<(Int64, Int64), KafkaError> = await client.blocking { handle in
            var low: Int64 = 0
            var high: Int64 = 0
            let error = rd_kafka_query_watermark_offsets(handle, partition.topic, partition.partition, &low, &high, timeout)
            return error == RD_KAFKA_RESP_ERR_NO_ERROR ? .success((low, high)) : .failure(KafkaError(error, message: "watermarks of \(partition) unavailable"))
        }
        let (low, high) = try result.get()
        return (low, high)
    }

    /// For each partition, the earliest offset whose record timestamp is at or after `timestamp` (milliseconds),
    /// or the high watermark when there is none (Kafka's offsetsForTimes).
    public func offsets(for partitions: [KafkaTopicPartition], at timestamp: Int64) async throws(KafkaError) -> [KafkaTopicPartition: Int64] {
        let timeout = timeoutMilliseconds
        let result: Result<[KafkaTopicPartition: Int64], KafkaError> = await client.blocking { handle in
            let list = partitions.makeList(offsets: Dictionary(uniqueKeysWithValues: partitions.map { ($0, timestamp) }))
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_offsets_for_times(handle, list, timeout)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { return .failure(KafkaError(error, message: "offsetsForTimes failed")) }
            var offsets: [KafkaTopicPartition: Int64] = [:]
            for entry in list.entries {
                guard entry.error == RD_KAFKA_RESP_ERR_NO_ERROR else { return .failure(KafkaError(entry.error, message: "offsetsForTimes of \(entry.partition) failed")) }
                offsets[entry.partition] = entry.offset
            }
            return .success(offsets)
        }
        var offsets = try result.get()
        // -1 means "no record at or after the time": the end of the partition.
        for (partition, offset) in offsets where offset < 0 { offsets[partition] = try await watermarks(partition).high }
        return offsets
    }

    // MARK: Groups

    /// A consumer group, its members and its position in each partition.
    public struct GroupDescription: Sendable, Hashable {
        public struct Member: Sendable, Hashable {
            public var memberId: String
            public var clientId: String
            public var host: String
            public var assignment: [KafkaTopicPartition]
        }

        public struct PartitionPosition: Sendable, Hashable {
            public var partition: KafkaTopicPartition
            /// The committed offset (next record to process), nil if the group never committed one here.
            public var committed: Int64?
            /// The offset the next record written will get.
            public var end: Int64
            /// Records not yet processed: end − committed (all of them without a commit).
            public var lag: Int64 { max(0, end - (committed ?? 0)) }
        }

        public var groupId: String
        /// librdkafka's name of the group state: Empty, Stable, PreparingRebalance, CompletingRebalance, Dead, Unknown.
        public var state: String
        public var members: [Member]
        public var positions: [PartitionPosition]
    }

    /// Describes `groupId` and, for `topics` (default: those it committed offsets for), its committed offsets,
    /// end offsets and lag.
    public func describeGroup(_ groupId: String, topics: [String]? = nil) async throws(KafkaError) -> GroupDescription {
        let timeout = timeoutMilliseconds
        let described: Result<(String, [GroupDescription.Member]), KafkaError> = await client.blocking { handle in
            KafkaAdminClient.request(handle, timeout: timeout, operation: RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS) { handle, options, queue in
                var groups: [UnsafePointer<CChar>?] = [UnsafePointer(strdup(groupId))]
                defer { free(UnsafeMutablePointer(mutating: groups[0])) }
                groups.withUnsafeMutableBufferPointer { rd_kafka_DescribeConsumerGroups(handle, $0.baseAddress, 1, options, queue) }
            } read: { event in
                var count = 0
                guard let groups = rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(event), &count), count == 1,
                    let group = groups[0]
                else { return .failure(.client("no DescribeConsumerGroups result for \(groupId)")) }
                if let error = rd_kafka_ConsumerGroupDescription_error(group), rd_kafka_error_code(error) != RD_KAFKA_RESP_ERR_NO_ERROR {
                    return .failure(KafkaError(code: rd_kafka_error_code(error).rawValue, message: String(cString: rd_kafka_error_string(error))))
                }
                let state = String(cString: rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(group)))
                var members: [GroupDescription.Member] = []
                for index in 0..<rd_kafka_ConsumerGroupDescription_member_count(group) {
                    guard let member = rd_kafka_ConsumerGroupDescription_member(group, index) else { continue }
                    var assignment: [KafkaTopicPartition] = []
                    if let memberAssignment = rd_kafka_MemberDescription_assignment(member),
                        let partitions = rd_kafka_MemberAssignment_partitions(memberAssignment)
                    {
                        assignment = UnsafeMutablePointer(mutating: partitions).entries.map(\.partition).sorted()
                    }
                    members.append(
                        .init(
                            memberId: String(cString: rd_kafka_MemberDescription_consumer_id(member)),
                            clientId: String(cString: rd_kafka_MemberDescription_client_id(member)),
                            host: String(cString: rd_kafka_MemberDescription_host(member)), assignment: assignment))
                }
                return .success((state, members))
            }
        }
        let (state, members) = try described.get()
        var known: [KafkaTopicPartition]?
        if let topics {
            let metadata = try await listTopics()
            known = topics.flatMap { topic in (0..<Int32(metadata[topic] ?? 0)).map { KafkaTopicPartition(topic: topic, partition: $0) } }
        }
        let committed = try await committedOffsets(groupId, partitions: known)
        var partitions = Set(committed.keys)
        if let topics {
            partitions = partitions.filter { topics.contains($0.topic) }
            let metadata = try await listTopics()
            for topic in topics {
                for partition in 0..<Int32(metadata[topic] ?? 0) { partitions.insert(KafkaTopicPartition(topic: topic, partition: partition)) }
            }
        }
        var positions: [GroupDescription.PartitionPosition] = []
        for partition in partitions.sorted() {
            positions.append(.init(partition: partition, committed: committed[partition], end: try await watermarks(partition).high))
        }
        return GroupDescription(groupId: groupId, state: state, members: members, positions: positions)
    }

    /// The group's committed offsets, per partition: of `partitions`, or of every partition it committed for.
    /// Brokers that do not answer "every partition" (librdkafka's mock cluster) need the explicit list.
    public func committedOffsets(_ groupId: String, partitions: [KafkaTopicPartition]? = nil) async throws(KafkaError) -> [KafkaTopicPartition: Int64] {
        let timeout = timeoutMilliseconds
        let result: Result<[KafkaTopicPartition: Int64], KafkaError> = await client.blocking { handle in
            KafkaAdminClient.request(handle, timeout: timeout, operation: RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS) { handle, options, queue in
                let list = partitions.map { $0.makeList() }
                defer { if let list { rd_kafka_topic_partition_list_destroy(list) } }
                var requests: [OpaquePointer?] = [rd_kafka_ListConsumerGroupOffsets_new(groupId, list)]
                defer { rd_kafka_ListConsumerGroupOffsets_destroy(requests[0]) }
                requests.withUnsafeMutableBufferPointer { rd_kafka_ListConsumerGroupOffsets(handle, $0.baseAddress, 1, options, queue) }
            } read: { event in
                var count = 0
                let groups = rd_kafka_ListConsumerGroupOffsets_result_groups(rd_kafka_event_ListConsumerGroupOffsets_result(event), &count)
                return KafkaAdminClient.groupResultOffsets(groups.map { UnsafePointer($0) }, count: count)
            }
        }
        return try result.get()
    }

    /// Thrown by `alterGroupOffsets` while the group has members.
    public struct GroupHasActiveMembers: Error, Sendable, CustomStringConvertible {
        public var groupId: String
        public var state: String
        /// The members, as far as the broker lists them (some brokers report the state but not the members).
        public var members: [GroupDescription.Member]
        public var description: String {
            let who = members.isEmpty
                ? "its members are not listed by this broker"
                : members.map { "\($0.clientId)@\($0.host) (\($0.memberId))" }.joined(separator: ", ")
            return "group \(groupId) is \(state), with active members (\(who)); stop its consumers and try again"
        }
    }

    /// The offsets read back after a commit differ from the plan: nothing must be reported as moved.
    public struct OffsetsNotMoved: Error, Sendable, CustomStringConvertible {
        public var groupId: String
        public var planned: [KafkaTopicPartition: Int64]
        public var committed: [KafkaTopicPartition: Int64]
        public var differing: [KafkaTopicPartition]
        public var description: String {
            let detail = differing.map { "\($0): planned \(planned[$0].map(String.init) ?? "-"), committed \(committed[$0].map(String.init) ?? "none")" }
            return "group \(groupId): the broker did not take the new offsets (\(detail.joined(separator: "; "))); nothing was replayed"
        }
    }

    /// Kafka allows moving a group's offsets only while it is Empty (or Dead): any other state has members.
    /// `Unknown` with no members listed is what the tansu test broker reports for a group whose members just
    /// left; moving offsets joins the group as its only member, which fails (nothing committed) if anyone else is
    /// in it, so accepting that state cannot move a live group's offsets.
    static func isIdle(_ description: GroupDescription) -> Bool {
        description.members.isEmpty && ["Empty", "Dead", "Unknown"].contains(description.state)
    }

    /// Sets the group's committed offsets (the next record to process, per partition). Refused while the group
    /// has active members.
    public func alterGroupOffsets(_ groupId: String, to offsets: [KafkaTopicPartition: Int64]) async throws -> [KafkaTopicPartition: Int64] {
        let description = try await describeGroup(groupId)
        guard Self.isIdle(description) else {
            throw GroupHasActiveMembers(groupId: groupId, state: description.state, members: description.members)
        }
        return try await alterIdleGroupOffsets(groupId, to: offsets)
    }

    /// Moves the offsets of a group already checked to be idle. A member that joins meanwhile keeps partitions
    /// from us; that is reported as `GroupHasActiveMembers` and nothing is committed.
    func alterIdleGroupOffsets(_ groupId: String, to offsets: [KafkaTopicPartition: Int64]) async throws -> [KafkaTopicPartition: Int64] {
        // As the group's only member: join, wait to own every partition to move, commit, leave. The admin API's
        // AlterConsumerGroupOffsets would do on Kafka; on the tansu test broker, a group altered that way soon
        // after its members left never completes a join again. A member's commit is plain Kafka everywhere.
        guard !offsets.isEmpty else { return [:] }
        var configuration = KafkaConsumerConfiguration(
            client: KafkaClientConfiguration(bootstrapServers: [bootstrapServers], additionalConfig: scanAdditionalConfig), groupId: groupId)
        configuration.sessionTimeoutMilliseconds = 6_000
        configuration.heartbeatIntervalMilliseconds = 500
        configuration.autoCommitIntervalMilliseconds = 3_600_000  // only the explicit commit below
        let topics = Array(Set(offsets.keys.map(\.topic))).sorted()
        let member = try KafkaConsumer(configuration: configuration, topics: topics, logger: client.context.logger)
        do {
            let deadline = ContinuousClock.now + .milliseconds(Int64(timeoutMilliseconds) * 3)
            while !Set(offsets.keys).isSubset(of: Set(try await member.assignment())) {
                guard ContinuousClock.now < deadline else {
                    throw GroupHasActiveMembers(groupId: groupId, state: "rebalancing (another member joined while moving offsets)", members: [])
                }
                _ = try await member.pollBatch(maximum: 1, timeoutMilliseconds: 100)  // drives the join; records are ignored
            }
            // An explicit list: a stored offset below the committed one would be skipped (`_NO_OFFSET`) by a plain
            // commit on Apache Kafka, and the replay would silently do nothing. Read back, compare with the plan.
            try await member.commit(offsets)
            let committed = try await member.committed(Array(offsets.keys))
            let differing = offsets.keys.sorted().filter { committed[$0] != .some(offsets[$0]) }
            if !differing.isEmpty {
                throw OffsetsNotMoved(groupId: groupId, planned: offsets, committed: committed.compactMapValues { $0 }, differing: differing)
            }
        } catch {
            await member.close()
            throw error
        }
        await member.close()
        return offsets
    }

    // MARK: Plumbing

    static func groupResultOffsets(_ groups: UnsafePointer<OpaquePointer?>?, count: Int) -> Result<[KafkaTopicPartition: Int64], KafkaError> {
        guard let groups, count == 1, let group = groups[0] else { return .failure(.client("no group result")) }
        if let error = rd_kafka_group_result_error(group), rd_kafka_error_code(error) != RD_KAFKA_RESP_ERR_NO_ERROR {
            return .failure(KafkaError(code: rd_kafka_error_code(error).rawValue, message: String(cString: rd_kafka_error_string(error))))
        }
        var offsets: [KafkaTopicPartition: Int64] = [:]
        if let partitions = rd_kafka_group_result_partitions(group) {
            for entry in UnsafeMutablePointer(mutating: partitions).entries {
                if entry.error != RD_KAFKA_RESP_ERR_NO_ERROR {
                    return .failure(KafkaError(entry.error, message: "offset of \(entry.partition): \(String(cString: rd_kafka_err2str(entry.error)))"))
                }
                if entry.offset >= 0 { offsets[entry.partition] = entry.offset }
            }
        }
        return .success(offsets)
    }

    /// Runs one admin request on a private queue and reads its result event. Runs on the blocking queue.
    static func request<T>(
        _ handle: OpaquePointer, timeout: Int32, operation: rd_kafka_admin_op_t,
        start: (OpaquePointer, OpaquePointer?, OpaquePointer?) -> Void,
        read: (OpaquePointer) -> Result<T, KafkaError>
    ) -> Result<T, KafkaError> {
        guard let queue = rd_kafka_queue_new(handle) else { return .failure(.client("rd_kafka_queue_new failed")) }
        defer { rd_kafka_queue_destroy(queue) }
        let options = rd_kafka_AdminOptions_new(handle, operation)
        defer { rd_kafka_AdminOptions_destroy(options) }
        var errorText = [CChar](repeating: 0, count: 512)
        rd_kafka_AdminOptions_set_request_timeout(options, timeout, &errorText, errorText.count)
        start(handle, options, queue)
        guard let event = rd_kafka_queue_poll(queue, timeout + 1_000) else {
            return .failure(KafkaError(RD_KAFKA_RESP_ERR__TIMED_OUT, message: "admin request timed out after \(timeout) ms\(Librdkafka.upgradeAdvice)"))
        }
        defer { rd_kafka_event_destroy(event) }
        let error = rd_kafka_event_error(event)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            return .failure(KafkaError(error, message: rd_kafka_event_error_string(event).map { String(cString: $0) }))
        }
        return read(event)
    }
}
