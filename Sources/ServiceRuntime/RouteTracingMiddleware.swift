import HTTPTypes
import Hummingbird
import Instrumentation
import Tracing

/// A server span per request that names what was asked for without the values in it: the method and the route
/// template (`GET /v1/apps/{bundleId}/customers/{customerId}` is `GET /v1/apps/:bundleId/customers/:customerId`),
/// never the path, the query, a header or the peer's address. Identifiers in paths and queries (customer ids, order
/// and transaction ids, an erasure's subject) stay out of traces (docs/privacy.md).
///
/// Each request starts a trace of its own: our endpoints face callers we do not trust with our sampling (Apple's POST
/// is unauthenticated; the customer API checks keys only after this runs), so a caller's `traceparent` neither picks
/// the trace id nor forces sampling at ratio 0. A caller's valid context is kept as a span link, so a backend's own
/// trace can still find ours; `tracestate` is dropped, never copied into a record or a span. (Hummingbird's
/// `TracingMiddleware` records `url.path`, `url.query` and continues the caller's trace: what this replaces.)
public struct RouteTracingMiddleware<Context: RequestContext>: RouterMiddleware {
    let tracer: any Tracer

    /// `tracer`: the process's (the default), or a test's.
    public init(tracer: any Tracer = InstrumentationSystem.tracer) {
        self.tracer = tracer
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let span: any Span = tracer.startSpan(request.method.rawValue, context: .topLevel, ofKind: .server)
        if let caller = Self.callerContext(request.headers, tracer: tracer) { span.addLink(SpanLink(context: caller, attributes: [:])) }
        span.updateAttributes { attributes in
            attributes["http.request.method"] = request.method.rawValue
        }
        func named(_ status: Int) {
            let route = context.endpointPath.flatMap { $0.hasPrefix("/") ? Self.template($0) : nil }
            span.operationName = route.map { "\(request.method.rawValue) \($0)" } ?? "\(request.method.rawValue) (no route)"
            span.updateAttributes { attributes in
                if let route { attributes["http.route"] = route }
                attributes["http.response.status_code"] = status
            }
            if status >= 500 { span.setStatus(.init(code: .error)) }
        }
        do {
            // Ends when the handler answered: our answers are small buffers written at once, so the span covers the work.
            let response = try await ServiceContext.$current.withValue(span.context) { try await next(request, context) }
            named(Int(response.status.code))
            span.end()
            return response
        } catch {
            named((error as? any HTTPResponseError)?.status.code ?? 500)
            span.end()
            throw error
        }
    }

    /// The caller's context from its `traceparent` alone (bounded: a valid W3C value is 55 characters), or nil.
    static func callerContext(_ headers: HTTPFields, tracer: any Tracer) -> ServiceContext? {
        guard let name = HTTPField.Name(PipelineTracing.traceparentHeader), let value = headers[name], value.utf8.count <= 64, hasTraceId(value) else { return nil }
        var context = ServiceContext.topLevel
        tracer.extract([PipelineTracing.traceparentHeader: value], into: &context, using: TraceParentOnly())
        return context
    }

    /// Whether `traceparent`'s second field is a trace id (32 lowercase hex digits, not all zero), the rule of the
    /// core's `TraceParent`, which this module does not import.
    static func hasTraceId(_ traceparent: String) -> Bool {
        let parts = traceparent.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4 else { return false }
        let id = parts[1].utf8
        return id.count == 32 && id.allSatisfy { (48...57).contains($0) || (97...102).contains($0) } && id.contains { $0 != 48 }
    }

    /// Hummingbird's `:name` parameters written as OpenAPI's `{name}`; the template is ours (the router's), never the
    /// caller's text.
    static func template(_ endpointPath: String) -> String {
        endpointPath.split(separator: "/", omittingEmptySubsequences: false).map { segment in
            segment.hasPrefix(":") ? "{\(segment.dropFirst())}" : String(segment)
        }.joined(separator: "/")
    }
}

/// Reads `traceparent` only: `tracestate` (unbounded, the caller's) is never taken.
struct TraceParentOnly: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? { key == PipelineTracing.traceparentHeader ? carrier[key] : nil }
}
