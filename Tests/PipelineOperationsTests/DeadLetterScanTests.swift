@testable import KafkaClient
import NotificationRecords
import PipelineOperations
import Testing

/// What `dlq list` and `dlq redrive` take from a streamed dead-letter topic.
@Suite("Dead-letter scan")
struct DeadLetterScanTests {
    static func letter(offset: Int64, originalOffset: Int64, failedAt: Int64, code: String = "signatureMismatch") -> KafkaConsumerMessage {
        KafkaConsumerMessage(
            topic: "n.dead-letter", partition: 0, offset: offset, key: nil, value: Array("payload".utf8),
            headers: [
                KafkaHeader(key: DeadLetterHeader.errorCode, string: code), KafkaHeader(key: DeadLetterHeader.originalTopic, string: "n"),
                KafkaHeader(key: DeadLetterHeader.originalPartition, string: "3"), KafkaHeader(key: DeadLetterHeader.originalOffset, string: String(originalOffset)),
                KafkaHeader(key: DeadLetterHeader.failedAt, string: String(failedAt)),
            ],
            timestamp: failedAt)
    }

    @Test("one per original record, nothing written after the cut-off, the newest kept without payloads")
    func scan() {
        var scan = DeadLetterScan(since: nil, until: 5_000, errorCode: nil, keepNewest: 1)
        #expect(scan.take(Self.letter(offset: 0, originalOffset: 10, failedAt: 1_000)) != nil)
        #expect(scan.take(Self.letter(offset: 1, originalOffset: 10, failedAt: 1_100)) == nil, "the same original, sent twice")
        #expect(scan.take(Self.letter(offset: 2, originalOffset: 11, failedAt: 2_000, code: "invalidChain")) != nil)
        #expect(scan.take(Self.letter(offset: 3, originalOffset: 12, failedAt: 6_000)) == nil, "dead-lettered after the re-drive began")
        #expect(scan.matched == 2 && scan.duplicates == 1 && scan.countsByCode == ["signatureMismatch": 1, "invalidChain": 1])
        #expect(scan.newestSorted.map(\.record.offset) == [2] && scan.newestSorted.allSatisfy { $0.record.value.isEmpty })
    }
}
