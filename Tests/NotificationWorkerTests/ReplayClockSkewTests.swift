import Foundation
import KafkaClient
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

@Suite("pipelinectl replay by time and ingest clock skew", .requiresKafka)
struct ReplayClockSkewTests {
    /// Records stamped a minute apart (ingest's received-at); `replay --to time:T` starts at the first record
    /// stamped at or after T − skew, so a record received just after T by an ingest whose clock ran ahead is replayed.
    @Test("--clock-skew-seconds moves the start of a replay by time earlier by exactly that much")
    func clockSkew() async throws {
        let bootstrap = try RequiredServices.bootstrap
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 1)
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap])), logger: ingestTestLogger)
        let base: Int64 = 1_790_000_000_000
        for index in 0..<10 {
            _ = try await producer.sendAndAwait(KafkaProducerMessage(topic: fixture.topic, value: Array("r\(index)".utf8), timestamp: base + Int64(index) * 60_000))
        }
        await producer.close()
        let group = TestServices.uniqueName("skew")
        let time = Date(timeIntervalSince1970: TimeInterval(base + 5 * 60_000) / 1000).formatted(.iso8601)
        // Expected records to reprocess: from T − skew on; records at T+0…T+4 min, and 60 s apart before T.
        for (skew, expected) in [(0, 5), (150, 7), (300, 10)] {
            let replay = try await fixture.pipelinectl(["replay", "--group", group, "--topic", fixture.topic, "--to", "time:\(time)", "--clock-skew-seconds", String(skew)])
            #expect(replay.status == 0, "\(replay.output)")
            #expect(try await fixture.lag(group: group) == Int64(expected), "skew \(skew) s: \(replay.output)")
        }
    }
}
