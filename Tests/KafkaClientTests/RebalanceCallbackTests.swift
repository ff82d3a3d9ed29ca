import CRDKafka
import Logging
import Testing

@testable import KafkaClient

@Suite("Rebalance callback")
struct RebalanceCallbackTests {
    /// librdkafka names no rebalance protocol while the consumer is not (or no longer) a group member, as when a
    /// revoke arrives during close. A full test run once crashed reading that NULL as a string.
    @Test("a revoke with no rebalance protocol known falls back to the configured strategy instead of crashing")
    func revokeWithoutProtocol() async throws {
        // A consumer handle with no group (librdkafka keeps no group state for it) is the plain way to get NULL.
        let (stream, continuation) = AsyncStream<KafkaRebalanceEvent>.makeStream()
        let context = ConsumerContext(logger: Logger(label: "rebalance-test"), metricsLabel: "rebalance-test", events: continuation, configuredCooperative: true)
        let client = try RDKafkaClient(type: RD_KAFKA_CONSUMER, properties: ["bootstrap.servers": "127.0.0.1:9"], context: context)
        let protocolKnown = await client.blocking { handle -> Bool in
            let known = rd_kafka_rebalance_protocol(handle) != nil
            let partitions = rd_kafka_topic_partition_list_new(1)!
            defer { rd_kafka_topic_partition_list_destroy(partitions) }
            context.rebalance(handle: handle, error: RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS, partitions: partitions)
            return known
        }
        #expect(!protocolKnown, "librdkafka names no protocol for a consumer outside a group")
        var events = stream.makeAsyncIterator()
        #expect(await events.next() == .revoked([]), "the revoke was handled and reported")
        await client.destroy()
    }
}
