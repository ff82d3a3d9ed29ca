import CRDKafka
/// Moving a group's position: the operation behind `pipelinectl replay`.
extension KafkaAdminClient {
    /// Where to move a group's committed offsets.
    public enum OffsetTarget: Sendable, Hashable {
        /// The first record still retained (replays everything).
        case earliest
        /// The end: skips everything not yet processed.
        case latest
        /// Exact next offsets per partition number.
        case offsets([Int32: Int64])
        /// The first record at or after this time (milliseconds since 1970), found by `lookup`.
        case timestamp(Int64, lookup: TimestampLookup)
    }

    /// The outcome of a reset, per partition.
    public struct OffsetReset: Sendable, Hashable {
        public var partition: KafkaTopicPartition
        /// The committed offset before (nil: none).
        public var before: Int64?
        public var after: Int64
        public var end: Int64
        /// Records the group will (re)process from the new position: end − after.
        public var toProcess: Int64 { max(0, end - after) }
    }

    /// Moves `groupId`'s committed offsets on `topic` (all partitions, or `partitions`) to `target`. Refused with
    /// `GroupHasActiveMembers` while the group has members. With `dryRun`, computes and returns the plan only.
    public func resetGroupOffsets(
        _ groupId: String, topic: String, partitions: [Int32]? = nil, to target: OffsetTarget, dryRun: Bool = false
    ) async throws -> [OffsetReset] {
        let description = try await describeGroupOrUnknown(groupId, topic: topic)
        guard Self.isIdle(description) else {
            throw GroupHasActiveMembers(groupId: groupId, state: description.state, members: description.members)
        }
        let partitionCount = try await listTopics()[topic] ?? 0
        guard partitionCount > 0 else { throw KafkaError.client("topic \(topic) does not exist") }
        let selected = (partitions ?? Array(0..<Int32(partitionCount))).map { KafkaTopicPartition(topic: topic, partition: $0) }
        var marks: [KafkaTopicPartition: (low: Int64, high: Int64)] = [:]
        for partition in selected { marks[partition] = try await watermarks(partition) }

        var targets: [KafkaTopicPartition: Int64] = [:]
        switch target {
        case .earliest:
            for partition in selected { targets[partition] = marks[partition]!.low }
        case .latest:
            for partition in selected { targets[partition] = marks[partition]!.high }
        case .offsets(let offsets):
            for partition in selected {
                guard let offset = offsets[partition.partition] else { continue }
                let (low, high) = marks[partition]!
                guard (low...high).contains(offset) else {
                    throw KafkaError.client("offset \(offset) of \(partition) is outside the retained range \(low)...\(high)")
                }
                targets[partition] = offset
            }
        case .timestamp(let milliseconds, let lookup):
            targets = try await offsets(for: selected, at: milliseconds, lookup: lookup)
        }
        let committed = Dictionary(uniqueKeysWithValues: description.positions.map { ($0.partition, $0.committed) })
        let plan = targets.keys.sorted().map { partition in
            OffsetReset(partition: partition, before: committed[partition] ?? nil, after: targets[partition]!, end: marks[partition]!.high)
        }
        if !dryRun { _ = try await alterIdleGroupOffsets(groupId, to: targets) }  // idleness checked above
        return plan
    }

    /// The group's description; where the broker does not implement DescribeGroups (librdkafka's mock cluster,
    /// some Kafka-compatible brokers), state `Unknown` with no members listed and the committed offsets read
    /// directly. The only-member join that moves the offsets then tells whether anyone else is live: it never
    /// gets every partition while another member holds some.
    func describeGroupOrUnknown(_ groupId: String, topic: String) async throws(KafkaError) -> GroupDescription {
        let described: Result<GroupDescription, KafkaError>
        do {
            described = .success(try await describeGroup(groupId, topics: [topic]))
        } catch {
            described = .failure(error)
        }
        guard case .failure(let error) = described,
            error.code == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE.rawValue || error.code == RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION.rawValue
        else { return try described.get() }
        client.context.logger.notice("the broker cannot describe groups (\(error.name)); the only-member join decides whether \(groupId) is idle")
        let partitions = (0..<Int32(try await listTopics()[topic] ?? 0)).map { KafkaTopicPartition(topic: topic, partition: $0) }
        let committed = try await committedOffsets(groupId, partitions: partitions)
        var positions: [GroupDescription.PartitionPosition] = []
        for partition in partitions {
            positions.append(.init(partition: partition, committed: committed[partition], end: try await watermarks(partition).high))
        }
        return GroupDescription(groupId: groupId, state: "Unknown", members: [], positions: positions)
    }
}
