import Prometheus

/// What ingest exports on `/metrics`. Labels are bounded: HTTP status and error code, never an id.
struct IngestMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    let inFlight: Gauge
    let requestBytes: Counter
    let produceLatency: DurationHistogram

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        inFlight = registry.makeGauge(descriptor: .init(metricName: "ingest_requests", unitName: "in_flight", helpText: "Notification requests being handled"))
        requestBytes = registry.makeCounter(descriptor: .init(metricName: "ingest_request_bytes", unitName: "total", helpText: "Bytes of notification bodies received"))
        produceLatency = registry.makeDurationHistogram(
            descriptor: .init(metricName: "ingest_produce_duration", unitName: "seconds", helpText: "Time from produce to the broker's acknowledgement"),
            buckets: [.milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
                      .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10)])
    }

    static var requests: MetricNameDescriptor { MetricNameDescriptor(metricName: "ingest_requests", unitName: "total", helpText: "Notification requests by HTTP status") }

    /// Counts a finished request by status and, for refusals, the error code.
    func request(status: Int, error: String? = nil) {
        var labels = [("status", String(status))]
        if let error { labels.append(("error", error)) }
        registry.makeCounter(descriptor: Self.requests, labels: labels).increment()
    }
}
