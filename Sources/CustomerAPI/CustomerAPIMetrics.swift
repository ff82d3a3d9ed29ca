import Prometheus

/// What the customer API exports on `/metrics`. Labels are bounded: the operation id of the spec and the HTTP
/// status, never an id of a customer or a transaction.
struct CustomerAPIMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    /// From a purchase's POST to the worker's commit of it, for the purchases answered 200 or 409.
    let applyLatency: DurationHistogram
    /// Set App Account Token calls by outcome (`set`, `family-refused`, `failed`).
    let appleTokenCalls: @Sendable (String) -> Void

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        applyLatency = registry.makeDurationHistogram(
            descriptor: .init(metricName: "customer_api_purchase_apply_duration", unitName: "seconds", helpText: "Time from a purchase's POST until a worker applied it"),
            buckets: [.milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
                      .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10)])
        appleTokenCalls = { outcome in
            registry.makeCounter(
                descriptor: .init(metricName: "customer_api_set_app_account_token", unitName: "total", helpText: "Set App Account Token calls by outcome"),
                labels: [("outcome", outcome)]).increment()
        }
    }

    /// Offer signatures issued and refused, by kind and the rule that decided (the rules' names: bounded by the
    /// app's rules file).
    func offer(_ kind: String, outcome: String, reason: String) {
        registry.makeCounter(
            descriptor: .init(metricName: "customer_api_offers", unitName: "total", helpText: "Offer signatures issued or refused, by kind, outcome and deciding rule"),
            labels: [("kind", kind), ("outcome", outcome), ("reason", reason)]).increment()
    }

    /// Apple's real-time retention requests by answer (message, alternate-product, promotional-offer, none, refused)
    /// and reason (the rule, or why no message: bounded names).
    func retention(answer: String, reason: String) {
        registry.makeCounter(
            descriptor: .init(metricName: "customer_api_retention_answers", unitName: "total", helpText: "Real-time retention requests by answer and reason"),
            labels: [("answer", answer), ("reason", reason)]).increment()
    }

    static var requests: MetricNameDescriptor {
        MetricNameDescriptor(metricName: "customer_api_requests", unitName: "total", helpText: "Customer API requests by route (operation id) and HTTP status")
    }

    func request(route: String, status: Int) {
        registry.makeCounter(descriptor: Self.requests, labels: [("route", route), ("status", String(status))]).increment()
    }
}
