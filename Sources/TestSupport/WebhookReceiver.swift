import AppStoreNotifications
import Foundation
import Hummingbird
import Logging
import Synchronization

/// A webhook receiver on loopback for tests: records every POST it gets (headers, body, its own answer) and
/// answers as told. Paths: `/hook/<name>` answers 200 (or 500 while the event's subject is failing),
/// `/redirect` answers 302 to `/redirected` (which records too, so a followed redirect would show), `/slow`
/// answers only after `slowSeconds`. Misbehaving receivers: `/stall` sends a head announcing 100 bytes and then
/// nothing; `/trickle` sends them one byte every half second; `/gone` answers 410; `/busy` answers a delivery's
/// first attempt 429 with `Retry-After: <busyRetryAfterSeconds>`, its next 200.
public final class WebhookReceiver: Sendable {
    public struct Delivery: Sendable {
        public var path: String
        public var id: String
        public var timestamp: Int64
        public var signature: String
        public var body: [UInt8]
        public var status: Int
        public var arrived: ContinuousClock.Instant
        /// The W3C `traceparent` the delivery carried, if any.
        public var traceparent: String? = nil
        public var json: JSONObject? { try? StrictJSONParser().parseObject(body) }
        public var subject: String { json?["subject"]?.stringValue ?? "" }
        public var type: String { json?["type"]?.stringValue ?? "" }
    }

    struct State {
        var deliveries: [Delivery] = []
        var failingSubjects: Set<String> = []
        var delay: Duration = .zero
        var server: LoopbackServer?
    }

    private let state = Mutex(State())
    public let slowSeconds: Int
    public let busyRetryAfterSeconds: Int
    let logger: Logger

    public init(slowSeconds: Int = 5, busyRetryAfterSeconds: Int = 3) {
        self.slowSeconds = slowSeconds
        self.busyRetryAfterSeconds = busyRetryAfterSeconds
        self.logger = quietLogger("webhook-receiver")
    }

    /// Starts on a free port of 127.0.0.1 and returns it.
    public func start() async throws -> Int {
        let router = Router()
        router.post("/hook/:name") { request, context in try await self.receive(request, path: "/hook/" + (context.parameters.get("name") ?? "")) }
        router.post("/redirected") { request, _ in try await self.receive(request, path: "/redirected") }
        router.post("/redirect") { request, _ in
            _ = try await self.record(request, path: "/redirect", status: 302)
            return Response(status: .found, headers: [.location: "/redirected"])
        }
        router.post("/slow") { request, _ in
            let arrived = ContinuousClock.now
            try await Task.sleep(for: .seconds(self.slowSeconds))
            return try await self.receive(request, path: "/slow", arrived: arrived)
        }
        router.post("/stall") { request, _ in
            _ = try await self.record(request, path: "/stall", status: 200)
            return Response(status: .ok, headers: [.contentLength: "100"], body: ResponseBody { writer in
                try await Task.sleep(for: .seconds(30))  // the head is out; the body never comes (the sender cuts it)
                try await writer.finish(nil)
            })
        }
        router.post("/trickle") { request, _ in
            _ = try await self.record(request, path: "/trickle", status: 200)
            return Response(status: .ok, headers: [.contentLength: "100"], body: ResponseBody { writer in
                for _ in 0..<100 {
                    try await writer.write(ByteBuffer(string: "."))
                    try await Task.sleep(for: .milliseconds(500))
                }
                try await writer.finish(nil)
            })
        }
        router.post("/gone") { request, _ in
            _ = try await self.record(request, path: "/gone", status: 410)
            return Response(status: .gone)
        }
        router.post("/busy") { request, _ in
            // Whether this delivery was seen is decided where it is recorded, under one lock: two attempts of one
            // id arriving together get one 429 and one 200.
            let status = try await self.record(request, path: "/busy") { id, deliveries in
                deliveries.contains { $0.path == "/busy" && $0.id == id } ? 200 : 429
            }
            return status == 200
                ? Response(status: .ok)
                : Response(status: .tooManyRequests, headers: [.retryAfter: String(self.busyRetryAfterSeconds)])
        }
        let server = try await LoopbackServer.start(router, name: "webhook-receiver", logger: logger)
        state.withLock { $0.server = server }
        return server.port
    }

    public func stop() async {
        await state.withLock { $0.server }?.stop()
    }

    /// While `subject` is failing, its deliveries get 500.
    public func setFailing(_ subject: String, _ failing: Bool) {
        state.withLock { if failing { $0.failingSubjects.insert(subject) } else { $0.failingSubjects.remove(subject) } }
    }

    /// Every answer waits this long first (a slow receiver).
    public func setDelay(_ delay: Duration) {
        state.withLock { $0.delay = delay }
    }

    /// Every POST received so far, in arrival order.
    public var deliveries: [Delivery] { state.withLock { $0.deliveries } }

    func receive(_ request: Request, path: String, arrived: ContinuousClock.Instant = .now) async throws -> Response {
        let delay = state.withLock { $0.delay }
        if delay > .zero { try await Task.sleep(for: delay) }
        let status = try await record(request, path: path, arrived: arrived)
        return Response(status: .init(code: status), body: .init(byteBuffer: ByteBuffer(string: status == 200 ? "ok" : "failing on purpose")))
    }

    /// Records the request, stamped with when it `arrived` (before its body was read, and before any delay of the
    /// route), with the status `answer` decides from its `webhook-id` and the deliveries recorded before it, under the
    /// same lock; nil: 500 if its subject is failing, else 200.
    func record(
        _ request: Request, path: String, arrived: ContinuousClock.Instant = .now, answer: (_ id: String, _ earlier: [Delivery]) -> Int? = { _, _ in nil }
    ) async throws -> Int {
        let body = Array(buffer: try await request.body.collect(upTo: 1 << 20))
        let subject = (try? StrictJSONParser().parseObject(body))?["subject"]?.stringValue ?? ""
        let id = request.headers[.init("webhook-id")!] ?? ""
        return state.withLock { state in
            let status = answer(id, state.deliveries) ?? (state.failingSubjects.contains(subject) ? 500 : 200)
            state.deliveries.append(Delivery(
                path: path, id: id, timestamp: Int64(request.headers[.init("webhook-timestamp")!] ?? "") ?? 0,
                signature: request.headers[.init("webhook-signature")!] ?? "", body: body, status: status, arrived: arrived,
                traceparent: request.headers[.init(TraceParent.header)!]))
            return status
        }
    }

    /// Records the request with a fixed `status`.
    func record(_ request: Request, path: String, status: Int) async throws -> Int {
        try await record(request, path: path) { _, _ in status }
    }
}
