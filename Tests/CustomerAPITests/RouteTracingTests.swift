import HTTPTypes
import Hummingbird
import HummingbirdTesting
import InMemoryTracing
import ServiceRuntime
import Testing
import Tracing

/// The server spans of ingest and the customer API (`RouteTracingMiddleware`), in process with an in-memory tracer:
/// they name the method and the route template, never the path's values, the query, a header or the peer (issue 51:
/// Hummingbird's `TracingMiddleware` recorded `url.path` and `url.query`, customer ids and erasure ids among them).
@Suite("Server spans name the route, never the values")
struct RouteTracingTests {
    @Test("a customer read, an erasure and an unknown path: http.route is the template; no identifier, query or tracestate in any span; each request its own trace")
    func routeTemplatesOnly() async throws {
        let tracer = InMemoryTracer()
        let router = Router()
        router.add(middleware: RouteTracingMiddleware(tracer: tracer))
        router.get("/v1/apps/:bundleId/customers/:customerId") { _, _ in "{}" }
        router.delete("/v1/apps/:bundleId/customers/:customerId") { _, _ in Response(status: .accepted) }
        let customer = "5e0c7e7a-2f0e-4d7f-9a39-4b1c2d3e4f50"
        let app = Application(router: router)
        try await app.test(.router) { client in
            let caller: HTTPFields = [
                HTTPField.Name("traceparent")!: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                HTTPField.Name("tracestate")!: "vendor=secret-state", .userAgent: "backend/\(customer)",
            ]
            try await client.execute(uri: "/v1/apps/com.example.app/customers/\(customer)?environment=Production", method: .get, headers: caller) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/v1/apps/com.example.app/customers/\(customer)?requestId=ticket-991&reason=gdpr", method: .delete) { response in
                #expect(response.status == .accepted)
            }
            try await client.execute(uri: "/v1/orders/MQ7R8X2KLZ", method: .get) { response in
                #expect(response.status == .notFound)
            }
        }
        let spans = tracer.finishedSpans
        #expect(spans.count == 3)
        #expect(spans.map(\.operationName) == [
            "GET /v1/apps/{bundleId}/customers/{customerId}", "DELETE /v1/apps/{bundleId}/customers/{customerId}", "GET (no route)",
        ])
        #expect(spans[0].attributes["http.route"]?.toSpanAttribute() == .string("/v1/apps/{bundleId}/customers/{customerId}"))
        #expect(spans.map { $0.attributes["http.response.status_code"]?.toSpanAttribute() } == [.int64(200), .int64(202), .int64(404)])
        for span in spans {
            var text = span.operationName
            span.attributes.forEach { key, value in text += " \(key)=\(value)" }
            for secret in [customer, "ticket-991", "gdpr", "Production", "MQ7R8X2KLZ", "secret-state", "com.example.app", "backend/"] {
                #expect(!text.contains(secret), "\(span.operationName) records \(secret): \(text)")
            }
            #expect(span.parentSpanID == nil, "each request starts a trace of its own")
        }
        #expect(Set(spans.map(\.traceID)).count == 3)
    }
}
