import CRDKafka

/// Hooks into librdkafka's in-process mock cluster (`test.mock.num.brokers`), for tests that inject broker
/// errors or need features a test broker lacks. Not for production use.
extension KafkaProducer {
    /// Makes the next `codes.count` requests with Kafka API key `apiKey` (0 = Produce, 3 = Metadata, ...) fail
    /// with these error codes. False unless the producer runs against the mock cluster.
    @_spi(Testing)
    public func injectMockErrors(apiKey: Int16, codes: [Int32]) -> Bool {
        guard let cluster = rd_kafka_handle_mock_cluster(client.handle.pointer) else { return false }
        let errors = codes.map { rd_kafka_resp_err_t(rawValue: $0) }
        errors.withUnsafeBufferPointer { rd_kafka_mock_push_request_errors_array(cluster, apiKey, $0.count, $0.baseAddress) }
        return true
    }

    /// Raises a fatal error on the librdkafka instance in use (`rd_kafka_test_fatal_error`), as a broker that
    /// fenced the idempotent producer would. Works on any cluster.
    @_spi(Testing)
    public func injectFatalError(reason: String) {
        _ = rd_kafka_test_fatal_error(client.handle.pointer, RD_KAFKA_RESP_ERR_PRODUCER_FENCED, reason)
    }

    /// Takes the mock cluster's broker `id` down (closing its connections) or brings it back up.
    @_spi(Testing)
    public func setMockBroker(_ id: Int32, up: Bool) -> Bool {
        guard let cluster = rd_kafka_handle_mock_cluster(client.handle.pointer) else { return false }
        return (up ? rd_kafka_mock_broker_set_up(cluster, id) : rd_kafka_mock_broker_set_down(cluster, id)) == RD_KAFKA_RESP_ERR_NO_ERROR
    }

    /// The mock cluster's bootstrap servers, so other clients can join it.
    @_spi(Testing)
    public var mockBootstrapServers: String? {
        rd_kafka_handle_mock_cluster(client.handle.pointer).map { String(cString: rd_kafka_mock_cluster_bootstraps($0)) }
    }
}
