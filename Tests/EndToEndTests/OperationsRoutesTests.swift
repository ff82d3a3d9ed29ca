import Foundation
import Hummingbird
import HummingbirdTesting
import Prometheus
import ServiceRuntime
import Testing

/// The ops routes every service serves (`OperationsRoutes`), in process: what an orchestrator's probes and a
/// Prometheus scrape get, and the refusal body's JSON shape.
@Suite("Ops routes in process")
struct OperationsRoutesTests {
    @Test("/health/live is 200; /health/ready is 200, then 503 with the reason as JSON; /metrics is Prometheus text with the registry's series")
    func routes() async throws {
        let registry = PrometheusCollectorRegistry()
        registry.makeCounter(descriptor: .init(metricName: "ops_routes_test", unitName: "total", helpText: "A test series")).increment(by: Int64(3))
        let reason = ReasonBox()
        let router = Router()
        OperationsRoutes.add(to: router, registry: registry) { reason.value }
        try await Application(router: router).test(.router) { client in
            try await client.execute(uri: OperationsRoutes.live, method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: OperationsRoutes.ready, method: .get) { #expect($0.status == .ok) }
            reason.value = "the database is \"away\" / migrating"
            try await client.execute(uri: OperationsRoutes.ready, method: .get) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.contentType] == "application/json")
                let body = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: String])
                #expect(body == ["error": "notReady", "reason": "the database is \"away\" / migrating"])
            }
            try await client.execute(uri: OperationsRoutes.metrics, method: .get) { response in
                #expect(response.status == .ok && response.headers[.contentType]?.hasPrefix("text/plain") == true)
                #expect(String(buffer: response.body).contains("ops_routes_test_total 3"))
            }
        }
    }

    @Test("the refusal body: error then reason, quotes escaped, slashes and non-ASCII as written")
    func refusalBody() {
        #expect(RefusalBody.json(code: "bodyTooLarge", reason: "a \"b\" / é") == #"{"error":"bodyTooLarge","reason":"a \"b\" / é"}"#)
    }
}

/// The readiness reason a test changes while the router reads it.
final class ReasonBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: String?
    var value: String? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
