import Foundation
import KafkaClient
import PipelineOperations
import Synchronization
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

@Suite("TopicReader against the test broker", .requiresKafka)
struct TopicReaderTests {
    @Test("with since, each partition is read from the first record stamped at or after it: only those are fetched and handed over")
    func seeksByTime() async throws {
        let bootstrap = try RequiredServices.bootstrap
        let client = KafkaClientConfiguration(bootstrapServers: [bootstrap])
        let topic = TestServices.uniqueName("reader")
        let admin = try KafkaAdminClient(configuration: client, logger: ingestTestLogger)
        _ = try await admin.createTopics([.init(name: topic, partitions: 2)])
        for _ in 0..<50 where try await admin.listTopics()[topic] != 2 { try await Task.sleep(for: .milliseconds(100)) }
        await admin.close()
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(client: client), logger: ingestTestLogger)
        let base: Int64 = 1_790_000_000_000
        for index in 0..<40 {  // one at a time: the test broker reports a batch's base offset as the end
            _ = try await producer.sendAndAwait(KafkaProducerMessage(
                topic: topic, key: Array("key-\(index % 4)".utf8), value: Array("record \(index)".utf8), headers: [], timestamp: base + Int64(index) * 1_000))
        }
        await producer.close()

        let planned = Mutex<Int64>(0)
        let records = try await TopicReader.readAll(topic, client: client, logger: ingestTestLogger, since: base + 30_000, sinceMargin: 0) { _, total in
            planned.withLock { $0 = total }
        }
        #expect(records.count == 10 && records.allSatisfy { ($0.timestamp ?? 0) >= base + 30_000 }, "\(records.map { $0.timestamp ?? -1 })")
        #expect(planned.withLock { $0 } == 10, "only the records from the start time on are planned and fetched")
        let all = try await TopicReader.readAll(topic, client: client, logger: ingestTestLogger)
        #expect(all.count == 40)
    }
}
