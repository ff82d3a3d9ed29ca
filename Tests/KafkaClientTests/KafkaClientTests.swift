import Foundation
@_spi(Testing) import KafkaClient
import BrokerTestSupport
import TestSupport
import Testing
import TestGates

@Suite("Kafka client against a real broker", .serialized, .requiresKafka)
struct KafkaClientTests {
    @Test("produce and consume with keys, headers and timestamps", .freshTopic(partitions: 3))
    func produceAndConsume() async throws {
        let scope = try TestTopic.required
        let (bootstrap, topic) = (scope.bootstrap, scope.name)
        let producer = try scope.producer()
        var sent: [String: KafkaDeliveryReport] = [:]
        for index in 0..<30 {
            let report = try await producer.sendAndAwait(
                KafkaProducerMessage(
                    topic: topic, key: Array("key-\(index % 5)".utf8), value: Array("value-\(index)".utf8),
                    headers: [KafkaHeader(key: "index", string: String(index)), KafkaHeader(key: "empty", value: nil)],
                    timestamp: 1_700_000_000_000 + Int64(index)))
            #expect(report.topic == topic && report.offset >= 0)
            sent["value-\(index)"] = report
        }
        await producer.close()
        await producer.close()  // idempotent
        do {
            _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, value: [0]))
            Issue.record("a closed producer accepted a record")
        } catch {
            #expect(error.name == "_DESTROY", "\(error)")
        }

        let consumer = try KafkaConsumer(configuration: testConsumerConfiguration(bootstrap: bootstrap, group: TestServices.uniqueName("group")), topics: [topic], logger: testLogger)
        var received: [KafkaConsumerMessage] = []
        for try await message in consumer.messages {  // the batch-backed AsyncSequence
            received.append(message)
            try consumer.storeOffset(message)
            if received.count == 30 { break }
        }
        await consumer.close()
        #expect(try await consumer.pollBatch().isEmpty, "a closed consumer returns nothing, and does not crash")
        #expect(throws: KafkaError.self) { try consumer.storeOffset(received[0]) }
        await #expect(throws: KafkaError.self) { try await consumer.commit() }
        #expect(received.count == 30)
        for message in received {
            let value = String(decoding: message.value, as: UTF8.self)
            let index = try #require(message.headers.string("index").flatMap { Int($0) })
            #expect(value == "value-\(index)")
            #expect(message.key.map { String(decoding: $0, as: UTF8.self) } == "key-\(index % 5)")
            #expect(message.headers.contains(KafkaHeader(key: "empty", value: nil)))
            #expect(message.timestamp == 1_700_000_000_000 + Int64(index))
            #expect(sent[value]?.partition == message.partition && sent[value]?.offset == message.offset)
        }
        // Same key, same partition: the ordering guarantee ingest relies on.
        let partitionsByKey = Dictionary(grouping: received, by: { $0.key ?? [] }).mapValues { Set($0.map(\.partition)) }
        #expect(partitionsByKey.values.allSatisfy { $0.count == 1 })
    }

    @Test("sendInOrderAndAwait: one result per record in order, every key's records in its partition in the order given; a closed producer fails them all", .freshTopic(partitions: 3))
    func sendInOrder() async throws {
        let scope = try TestTopic.required
        let topic = scope.name
        let producer = try scope.producer()
        let messages = (0..<300).map { index in
            KafkaProducerMessage(topic: topic, key: Array("key-\(index % 7)".utf8), value: Array(String(index).utf8))
        }
        let results = await producer.sendInOrderAndAwait(messages)
        #expect(results.count == messages.count)
        let reports = results.compactMap { try? $0.get() }
        #expect(reports.count == messages.count, "every record acknowledged")
        // Within a key, offsets follow the order the records were given.
        for key in 0..<7 {
            let offsets = stride(from: key, to: messages.count, by: 7).map { reports[$0] }
            #expect(Set(offsets.map(\.partition)).count == 1)
            #expect(offsets.map(\.offset) == offsets.map(\.offset).sorted() && Set(offsets.map(\.offset)).count == offsets.count, "key-\(key) out of order")
        }
        await producer.close()
        let refused = await producer.sendInOrderAndAwait(Array(messages.prefix(5)))
        #expect(refused.count == 5 && refused.allSatisfy { if case .failure(let error) = $0 { error.name == "_DESTROY" } else { false } })
        #expect(await producer.sendInOrderAndAwait([]).isEmpty)
    }

    @Test("a group resumes exactly after its committed offset", .freshTopic(partitions: 1))
    func exactResume() async throws {
        let scope = try TestTopic.required
        let (bootstrap, topic, group, producer) = (scope.bootstrap, scope.name, scope.group, try scope.producer())
        for index in 0..<20 { _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, value: Array("m\(index)".utf8))) }
        await producer.close()

        let first = try KafkaConsumer(configuration: testConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        let firstBatch = try await consume(first) { $0.count >= 12 }
        #expect(firstBatch.map(\.offset) == Array(0..<12))
        try await first.commit()
        await first.close()

        let second = try KafkaConsumer(configuration: testConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        let secondBatch = try await consume(second) { $0.count >= 8 }
        await second.close()
        #expect(secondBatch.map(\.offset) == Array(12..<20))
        #expect(secondBatch.first.map { String(decoding: $0.value, as: UTF8.self) } == "m12")
    }

    @Test("two members split the partitions, and one takes over when the other leaves, nothing lost or doubled", .freshTopic(partitions: 6))
    func twoMembers() async throws {
        let scope = try TestTopic.required
        let (bootstrap, topic) = (scope.bootstrap, scope.name)
        let group = scope.group
        let total = 600
        let producer = try scope.producer()
        for index in 0..<total { try producer.send(KafkaProducerMessage(topic: topic, key: Array("k\(index)".utf8), value: Array("\(index)".utf8))) }
        try await producer.flush(timeoutMilliseconds: 10_000)
        await producer.close()

        let a = try KafkaConsumer(configuration: testConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        let b = try KafkaConsumer(configuration: testConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        // Both consume slowly until each owns some partitions and has processed records.
        async let fromA = consume(a, timeout: .seconds(20)) { $0.count >= 60 }
        async let fromB = consume(b, timeout: .seconds(20)) { $0.count >= 60 }
        let (processedA, firstB) = try await (fromA, fromB)
        let assignmentA = try await a.assignment()
        let assignmentB = try await b.assignment()
        #expect(!assignmentA.isEmpty && !assignmentB.isEmpty, "both members own partitions")
        #expect(Set(assignmentA).isDisjoint(with: assignmentB), "no partition is owned twice")
        // A leaves (committing what it stored); B takes over A's partitions and finishes.
        await a.close()
        let restB = try await consume(b, timeout: .seconds(30)) { firstB.count + $0.count + processedA.count >= total }
        await b.close()

        let all = (processedA + firstB + restB).map { String(decoding: $0.value, as: UTF8.self) }
        #expect(Set(all).count == total, "every record processed")
        #expect(all.count == total, "no record processed by both members: \(all.count - Set(all).count) doubled")
    }

    @Test("sendAndAwait fails retriably within its timeout while the broker is down, and works again after")
    func brokerDown() async throws {
        _ = try RequiredServices.bootstrap
        // A broker that keeps its state across the kill, like a real cluster (s3 storage on a loopback object store).
        let broker = try #require(PrivateKafkaBroker(persistent: true), "PIPELINE_TANSU_BIN/PIPELINE_OBJECT_STORE_BIN not set (scripts/services.sh env)")
        try await broker.start()
        let topic = TestServices.uniqueName("topic")
        let producer = try testProducer(
            bootstrap: broker.bootstrapServers, deliveryTimeout: 3_000,
            additional: ProcessInfo.processInfo.environment["KAFKA_TEST_DEBUG"].map { ["debug": $0] } ?? [:], logger: quietTestLogger)
        _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, value: Array("before".utf8)))

        broker.kill()
        let clock = ContinuousClock()
        let start = clock.now
        do {
            _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, value: Array("while down".utf8)))
            Issue.record("a record was acknowledged while the broker was down")
        } catch {
            #expect(error.isRetriable, "\(error)")
            #expect(!error.isFatal)
        }
        let elapsed = clock.now - start
        // Bounded by the delivery timeout (3 s) plus librdkafka's once-a-second timeout scan and a loaded machine.
        #expect(elapsed < .seconds(3 + 10), "bounded by the delivery timeout (3 s), took \(elapsed)")

        try await broker.start()
        var recovered = false
        var failures: [String] = []
        // The restarted broker reloads its state from storage; give a slow, shared machine a minute.
        let deadline = clock.now + .seconds(60)
        while !recovered, clock.now < deadline {
            do {
                _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, value: Array("after".utf8)))
                recovered = true
            } catch {
                #expect(!error.isFatal, "\(error)")
                failures.append(error.description)
            }
        }
        #expect(recovered, "the same producer works again once the broker is back; failures: \(failures)")
        await producer.close()
        broker.kill()
    }

    @Test("the timestamp scan finds the first record at or after a time on tansu", .freshTopic(partitions: 1))
    func timestampScan() async throws {
        let scope = try TestTopic.required
        let (bootstrap, topic) = (scope.bootstrap, scope.name)
        let producer = try scope.producer()
        for index in 0..<40 {
            _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, partition: 0, value: [UInt8(index)], timestamp: 5_000_000 + Int64(index) * 10))
        }
        await producer.close()
        let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: testLogger)
        let partition = KafkaTopicPartition(topic: topic, partition: 0)
        #expect(try await admin.offsets(for: [partition], at: 5_000_000 + 215, lookup: .scan)[partition] == 22)
        #expect(try await admin.offsets(for: [partition], at: 5_000_000 + 220, lookup: .scan)[partition] == 22)
        #expect(try await admin.offsets(for: [partition], at: 1, lookup: .scan)[partition] == 0)
        await admin.close()
    }

    @Test("resetting an idle group replays from the start; a group with a live member is refused", .freshTopic(partitions: 2))
    func offsetReset() async throws {
        let scope = try TestTopic.required
        let (bootstrap, topic, group, producer) = (scope.bootstrap, scope.name, scope.group, try scope.producer())
        for index in 0..<10 { _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, key: Array("\(index)".utf8), value: Array("\(index)".utf8))) }
        await producer.close()
        let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: testLogger)

        let consumer = try KafkaConsumer(configuration: testConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        #expect(try await consume(consumer) { $0.count >= 10 }.count == 10)
        try await consumer.commit()
        let live = try await admin.describeGroup(group, topics: [topic])
        // tansu reports the state of a live group but lists no members; Apache Kafka lists them.
        #expect(live.state == "Stable" || live.members.count == 1, "\(live)")
        #expect(live.positions.reduce(0) { $0 + $1.lag } == 0)
        await #expect(throws: KafkaAdminClient.GroupHasActiveMembers.self) {
            _ = try await admin.alterGroupOffsets(group, to: [KafkaTopicPartition(topic: topic, partition: 0): 0, KafkaTopicPartition(topic: topic, partition: 1): 0])
        }
        await #expect(throws: KafkaAdminClient.GroupHasActiveMembers.self) {
            _ = try await admin.resetGroupOffsets(group, topic: topic, to: .earliest)
        }
        await consumer.close()

        let idle = try await admin.describeGroup(group, topics: [topic])
        #expect(idle.members.isEmpty && idle.state == "Empty", "\(idle)")
        // A dry run plans without moving anything.
        let plan = try await admin.resetGroupOffsets(group, topic: topic, to: .earliest, dryRun: true)
        #expect(plan.reduce(0) { $0 + $1.toProcess } == 10 && plan.allSatisfy { $0.after == 0 && $0.before != nil })
        #expect(try await admin.committedOffsets(group).values.reduce(0, +) == 10)
        _ = try await admin.resetGroupOffsets(group, topic: topic, to: .earliest)
        #expect(try await admin.committedOffsets(group).values.allSatisfy { $0 == 0 })

        let replay = try KafkaConsumer(configuration: testConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        let replayed = try await consume(replay) { $0.count >= 10 }
        await replay.close()
        #expect(Set(replayed.map { String(decoding: $0.value, as: UTF8.self) }) == Set((0..<10).map(String.init)))
        await admin.close()
    }
}

/// librdkafka's in-process mock cluster: broker errors on demand, and features tansu lacks.
@Suite("Kafka client against the mock cluster")
struct KafkaMockClusterTests {
    static let mock = ["test.mock.num.brokers": "1"]

    /// The mock cluster delays a group's first join by 3 s (like `group.initial.rebalance.delay.ms`): a session
    /// must outlast that, unlike the 2 s that keep joins fast on tansu.
    static func mockConsumerConfiguration(bootstrap: String, group: String) -> KafkaConsumerConfiguration {
        var configuration = testConsumerConfiguration(bootstrap: bootstrap, group: group)
        configuration.sessionTimeoutMilliseconds = 6_000
        configuration.heartbeatIntervalMilliseconds = 500
        return configuration
    }

    @Test("a non-retriable broker error surfaces as that typed error")
    func nonRetriable() async throws {
        let producer = try testProducer(bootstrap: "unused:9092", deliveryTimeout: 5_000, additional: Self.mock)
        _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "mocked", value: [1]))
        // 29 = TOPIC_AUTHORIZATION_FAILED
        #expect(producer.injectMockErrors(apiKey: 0, codes: [29]))
        do {
            _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "mocked", value: [2]))
            Issue.record("the injected error was not reported")
        } catch {
            #expect(error.code == 29 && error.name == "TOPIC_AUTHORIZATION_FAILED" && !error.isRetriable, "\(error)")
        }
        await producer.close()
    }

    @Test("retriable broker errors are retried within the delivery timeout, then reported as retriable")
    func retriable() async throws {
        let producer = try testProducer(bootstrap: "unused:9092", deliveryTimeout: 2_000, additional: Self.mock.merging(["retry.backoff.ms": "50"]) { $1 })
        _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "mocked", value: [1]))
        // A few NOT_ENOUGH_REPLICAS (19) are retried away: the record is delivered.
        #expect(producer.injectMockErrors(apiKey: 0, codes: [19, 19, 19]))
        _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "mocked", value: [2]))
        // Endless ones exhaust the delivery timeout: a retriable failure, never a fatal one.
        #expect(producer.injectMockErrors(apiKey: 0, codes: Array(repeating: 19, count: 1_000)))
        do {
            _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "mocked", value: [3]))
            Issue.record("delivered despite endless broker errors")
        } catch {
            #expect(error.isRetriable && !error.isFatal, "\(error)")
        }
        await producer.close()
    }

    @Test("a fatal error fails in-flight records retriably, and the next record goes through a new instance")
    func fatalErrorReplacesInstance() async throws {
        let producer = try testProducer(bootstrap: "unused:9092", deliveryTimeout: 5_000, additional: Self.mock, logger: quietTestLogger)
        _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "fenced", value: [1]))
        #expect(producer.replacements == 0)
        producer.injectFatalError(reason: "test: fenced by the broker")
        // The first record after the fatal error runs on a new instance: delivered, never a fatal error.
        let report = try await producer.sendAndAwait(KafkaProducerMessage(topic: "fenced", value: [2]))
        #expect(report.offset >= 0)
        #expect(producer.replacements == 1)
        _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "fenced", value: [3]))
        #expect(producer.replacements == 1, "a healthy instance is kept")
        await producer.close()
    }

    @Test("a broker answering PRODUCER_FENCED to a produce: a retriable failure, then a new instance delivers")
    func fencedByBroker() async throws {
        let producer = try testProducer(bootstrap: "unused:9092", deliveryTimeout: 5_000, additional: Self.mock, logger: quietTestLogger)
        _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "fenced", value: [1]))
        // 90 = PRODUCER_FENCED, what tansu answered after a restart from its stored state.
        #expect(producer.injectMockErrors(apiKey: 0, codes: Array(repeating: 90, count: 50)))
        var failures: [KafkaError] = []
        var delivered = false
        for attempt in 0..<5 where !delivered {
            do {
                _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "fenced", value: [UInt8(10 + attempt)]))
                delivered = true
            } catch {
                failures.append(error)
            }
        }
        #expect(delivered, "no record delivered after the fencing: \(failures)")
        #expect(!failures.isEmpty, "the fenced record was reported delivered")
        #expect(failures.allSatisfy { $0.isRetriable && !$0.isFatal }, "\(failures)")
        #expect(producer.replacements == 1)
        await producer.close()
    }

    @Test("replay on Apache Kafka's offset semantics: backwards to earliest, to offsets and to a time; read back; a live group refused")
    func replayOnMockCluster() async throws {
        let producer = try testProducer(bootstrap: "unused:9092", additional: Self.mock)
        let topic = "replayed"
        let ends: [Int32: Int64] = [0: 9, 1: 8, 2: 10, 3: 13]
        for (partition, count) in ends {
            for index in 0..<count {
                _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: topic, partition: partition, value: [UInt8(index)], timestamp: 1_000_000 + index * 1_000))
            }
        }
        let bootstrap = try #require(producer.mockBootstrapServers)
        let group = TestServices.uniqueName("group")
        // The group processed everything: committed at {9, 8, 10, 13}.
        let consumer = try KafkaConsumer(configuration: Self.mockConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        let total = Int(ends.values.reduce(0, +))
        #expect(try await consume(consumer, timeout: .seconds(30)) { $0.count >= total }.count == total)
        try await consumer.commit()
        // The admin's own default timeout, as pipelinectl replay has it: a replay's only-member join may take up to
        // three times it. The 4 s this test used (12 s for a join) was below what the in-process mock cluster needs
        // when the other suites' worker processes load both cores: two fresh-clone runs failed here with
        // "rebalancing" after 12 s, while the same join takes about 10 s on a quiet machine.
        let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: quietTestLogger)
        let partitions = ends.keys.sorted().map { KafkaTopicPartition(topic: topic, partition: $0) }
        #expect(try await admin.committedOffsets(group, partitions: partitions) == Dictionary(uniqueKeysWithValues: partitions.map { ($0, ends[$0.partition]!) }))

        // A live member: refused (the mock cluster cannot describe groups; the only-member join tells). Live means
        // polling, as a worker does: the join's rebalance is served by the member's poll. A member left unpolled is
        // evicted once the rebalance outlasts its session, and then the replay is right to proceed; a fresh-clone
        // run under load saw exactly that, so the member polls throughout.
        let polling = Task { while !Task.isCancelled { _ = try? await consumer.poll(timeoutMilliseconds: 100) } }
        await #expect(throws: KafkaAdminClient.GroupHasActiveMembers.self) {
            _ = try await admin.resetGroupOffsets(group, topic: topic, to: .earliest)
        }
        polling.cancel()
        _ = await polling.value
        await consumer.close()

        // Backwards to earliest: moved, and read back from the broker.
        let plan = try await admin.resetGroupOffsets(group, topic: topic, to: .earliest)
        #expect(plan.allSatisfy { $0.after == 0 } && plan.reduce(0) { $0 + $1.toProcess } == Int64(total))
        #expect(try await admin.committedOffsets(group, partitions: partitions) == Dictionary(uniqueKeysWithValues: partitions.map { ($0, 0) }), "a backwards replay must move the offsets")
        // To explicit offsets, forwards and backwards.
        _ = try await admin.resetGroupOffsets(group, topic: topic, to: .offsets([0: 5, 3: 2]))
        let afterOffsets = try await admin.committedOffsets(group, partitions: partitions)
        #expect(afterOffsets[partitions[0]] == 5 && afterOffsets[partitions[3]] == 2 && afterOffsets[partitions[1]] == 0)
        // To a time: the first record at or after it, per partition.
        _ = try await admin.resetGroupOffsets(group, topic: topic, to: .timestamp(1_000_000 + 7_500, lookup: .scan))
        let afterTime = try await admin.committedOffsets(group, partitions: partitions)
        #expect(afterTime == [partitions[0]: 8, partitions[1]: 8, partitions[2]: 8, partitions[3]: 8], "\(afterTime)")

        // The replayed group really starts there.
        let replay = try KafkaConsumer(configuration: Self.mockConsumerConfiguration(bootstrap: bootstrap, group: group), topics: [topic], logger: testLogger)
        let replayed = try await consume(replay, timeout: .seconds(30)) { $0.count >= 1 + 0 + 2 + 5 }
        await replay.close()
        #expect(replayed.count == 8 && replayed.allSatisfy { $0.offset >= 8 }, "\(replayed.map { "\($0.partition):\($0.offset)" })")
        await admin.close()
        await producer.close()
    }

    @Test("a quiet consumer learns that its broker is back from a metadata probe, with nothing produced")
    func reachabilityAfterBrokerRestart() async throws {
        let host = try testProducer(bootstrap: "unused:9092", additional: Self.mock, logger: quietTestLogger)
        _ = try await host.sendAndAwait(KafkaProducerMessage(topic: "quiet", value: [1]))
        let bootstrap = try #require(host.mockBootstrapServers)
        let consumer = try KafkaConsumer(configuration: Self.mockConsumerConfiguration(bootstrap: bootstrap, group: TestServices.uniqueName("group")), topics: ["quiet"], logger: quietTestLogger)
        _ = try await consume(consumer, timeout: .seconds(20)) { $0.count >= 1 }
        #expect(host.setMockBroker(1, up: false))
        let downSince = ContinuousClock.now
        while consumer.isBrokerReachable, ContinuousClock.now - downSince < .seconds(30) {
            _ = try await consumer.pollBatch(maximum: 1, timeoutMilliseconds: 200)  // serves the error callback
        }
        #expect(!consumer.isBrokerReachable, "the broker going away was noticed")
        #expect(await consumer.checkBrokerReachable(timeoutMilliseconds: 500) == false)
        #expect(host.setMockBroker(1, up: true))
        var reachable = false
        let upSince = ContinuousClock.now
        while !reachable, ContinuousClock.now - upSince < .seconds(30) {
            reachable = await consumer.checkBrokerReachable(timeoutMilliseconds: 1_000)
        }
        #expect(reachable && consumer.isBrokerReachable, "reachable again without a single record fetched")
        await consumer.close()
        await host.close()
    }

    @Test("offsets for a timestamp: the broker's time index where it has one, the scan where it does not")
    func offsetsForTimes() async throws {
        let producer = try testProducer(bootstrap: "unused:9092", additional: Self.mock)
        for index in 0..<10 {
            _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: "timed", partition: 0, value: [UInt8(index)], timestamp: 1_000_000 + Int64(index) * 1_000))
        }
        let bootstrap = try #require(producer.mockBootstrapServers)
        let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: testLogger)
        let partition = KafkaTopicPartition(topic: "timed", partition: 0)
        let marks = try await admin.watermarks(partition)
        #expect(marks.low == 0 && marks.high == 10)
        // librdkafka's mock answers every ListOffsets-by-time with the end offset (no time index), so only the
        // shape of the broker path is checked here; the scan must be exact.
        let fromBroker = try await admin.offsets(for: [partition], at: 1_000_000 + 4_500, lookup: .broker)
        #expect((0...10).contains(fromBroker[partition] ?? -1))
        #expect(try await admin.offsets(for: [partition], at: 1_000_000 + 4_500, lookup: .scan)[partition] == 5)
        #expect(try await admin.offsets(for: [partition], at: 0, lookup: .scan)[partition] == 0)
        #expect(try await admin.offsets(for: [partition], at: 2_000_000, lookup: .scan)[partition] == 10)
        await admin.close()
        await producer.close()
    }
}

@Suite("librdkafka version floor")
struct LibrdkafkaVersionTests {
    @Test("below 2.2 is refused with the reason; 2.2 and later run")
    func floor() {
        let refusal = Librdkafka.refusal(version: 0x0200_02FF, text: "2.0.2")
        #expect(refusal?.contains("older than 2.2") == true && refusal?.contains("loses records") == true)
        #expect(Librdkafka.refusal(version: 0x0201_01FF, text: "2.1.1") != nil)
        #expect(Librdkafka.refusal(version: 0x0202_00FF, text: "2.2.0") == nil)
        #expect(Librdkafka.refusal(version: 0x0210_00FF, text: "2.16.0") == nil)
    }
}
