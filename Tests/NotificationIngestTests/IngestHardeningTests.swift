import Foundation
import PipelineTestSupport
@testable import ServiceRuntime
import TestGates
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Hostile clients against a running ingest: slow heads, trickled and unfinished bodies, idle connections,
/// oversize announcements with and without `Expect`, framing errors, odd methods and `Host` headers. Each
/// refusal must be answered in the JSON shape (where the connection allows), counted, and end the connection.
@Suite("Ingest against hostile clients", .serialized, .requiresKafka)
struct IngestHardeningTests {
    /// Short deadlines, so the slow-client tests finish quickly; a test of something else passes a longer request
    /// deadline, so that a loaded machine's slowness is never mistaken for the client's.
    static func start(requestTimeout: Duration = .seconds(1)) async throws -> RunningIngest {
        let bootstrap = try RequiredServices.bootstrap
        return try await RunningIngest.start(bootstrap: bootstrap) {
            $0.requestTimeout = requestTimeout
            $0.idleTimeout = .milliseconds(1_500)
        }
    }

    /// Sends `request` (nothing, for `nil`) on one connection to a new ingest and reads until the ingest closes it
    /// (at most 5 s).
    static func answerUntilClosed(_ request: String?) async throws -> (text: String, closed: Bool) {
        let ingest = try await start()
        let connection = try RawConnection(port: ingest.port)
        if let request { #expect(connection.send(Array(request.utf8))) }
        let answer = await connection.readUntilClosed(seconds: 5)
        try await ingest.stop()
        return answer
    }

    @Test("a head trickled one byte every 0.2 s gets 408 and is closed at the request deadline")
    func slowHead() async throws {
        let ingest = try await Self.start()
        let connection = try RawConnection(port: ingest.port)
        let head = Array("POST /v2/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".utf8)
        var sent = 0
        let started = ContinuousClock.now
        while sent < head.count, connection.send([head[sent]]) {
            sent += 1
            try await Task.sleep(for: .milliseconds(200))
        }
        let answer = await connection.readUntilClosed(seconds: 5)
        #expect(answer.closed, "the connection outlived the deadline")
        #expect(answer.text.hasPrefix("HTTP/1.1 408") && answer.text.contains("\"requestTimeout\""), "\(answer.text)")
        #expect(ContinuousClock.now - started < .seconds(8) && sent < head.count, "cut off after \(sent) of \(head.count) bytes")
        try await expectCounted(ingest, status: 408, code: "requestTimeout")
        try await ingest.stop()
    }

    /// A connection the ingest must close, and how it answers first (nil: not at all).
    struct ClosedConnectionCase: Sendable, CustomTestStringConvertible {
        var name: String
        var request: String?
        var answerStart: String?
        var testDescription: String { name }
    }

    @Test(
        "closed by the ingest, not held while the client stays: a body announced as 100 bytes that sends 1 (408), an idle connection (no answer), HTTP/1.0 without keep-alive (answered)",
        arguments: [
            ClosedConnectionCase(
                name: "unfinished body", request: "POST /v2/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
                answerStart: "HTTP/1.1 408"),
            ClosedConnectionCase(name: "idle connection", request: nil, answerStart: nil),
            ClosedConnectionCase(name: "HTTP/1.0", request: "GET /health/live HTTP/1.0\r\n\r\n", answerStart: "HTTP/1.1 200"),
        ])
    func closedConnection(_ item: ClosedConnectionCase) async throws {
        let answer = try await Self.answerUntilClosed(item.request)
        #expect(answer.closed, "kept open")
        if let start = item.answerStart {
            #expect(answer.text.hasPrefix(start), "\(answer.text)")
        } else {
            #expect(answer.text.isEmpty, "\(answer.text)")
        }
    }

    @Test("an oversize Content-Length is refused before its body, with and without Expect: 100-continue, and the connection closed")
    func oversizeAnnounced() async throws {
        let ingest = try await Self.start()
        for expect in ["", "Expect: 100-continue\r\n"] {
            let connection = try RawConnection(port: ingest.port)
            #expect(connection.send(Array("POST /v2/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\(expect)Content-Length: 50000000\r\n\r\n".utf8)))
            let answer = await connection.readUntilClosed(seconds: 5)
            #expect(answer.closed, "kept open after the refusal")
            #expect(answer.text.hasPrefix("HTTP/1.1 400") && answer.text.contains("\"bodyTooLarge\"") && !answer.text.contains("100 Continue"), "\(answer.text)")
        }
        try await expectCounted(ingest, status: 400, code: "bodyTooLarge")
        try await ingest.stop()
    }

    @Test("Expect: 100-continue within the limit gets 100 at once, then the answer")
    func expectContinue() async throws {
        let ingest = try await Self.start()
        let connection = try RawConnection(port: ingest.port)
        let body = Array(#"{"signedPayload":"eyJh.eyJi.c2ln"}"#.utf8)
        #expect(connection.send(Array("POST /v2/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: \(body.count)\r\n\r\n".utf8)))
        let interim = connection.read(seconds: 3)
        #expect(interim.hasPrefix("HTTP/1.1 100"), "\(interim)")
        #expect(connection.send(body))
        let final = interim + connection.read(seconds: 10)
        #expect(final.contains("HTTP/1.1 200"), "\(final)")
        try await ingest.stop()
    }

    @Test("an oversize chunked body: refused, then the connection is closed instead of reading the rest")
    func oversizeChunked() async throws {
        // The body limit is what this checks, not the deadline: under load (two CI runs on two cores) sending the
        // chunks once took longer than the 1 s deadline, and the answer was a correct 408 instead.
        let ingest = try await Self.start(requestTimeout: .seconds(30))
        let connection = try RawConnection(port: ingest.port)
        #expect(connection.send(Array("POST /v2/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)))
        let chunk = Array("10000\r\n".utf8) + [UInt8](repeating: 0x61, count: 0x10000) + Array("\r\n".utf8)
        for _ in 0..<5 where connection.send(chunk) {}
        let answer = await connection.readUntilClosed(seconds: 5)
        #expect(answer.closed && answer.text.hasPrefix("HTTP/1.1 400") && answer.text.contains("bodyTooLarge"), "\(answer.text.prefix(300))")
        try await ingest.stop()
    }

    @Test("framing errors, odd methods and Host headers: refused in the JSON shape and counted")
    func refusals() async throws {
        let ingest = try await Self.start()
        let cases: [(request: String, status: Int, code: String)] = [
            ("POST /v2/notifications HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, "malformedRequest"),
            ("GARBAGE\u{1B}[31m\r\n\r\n", 400, "malformedRequest"),
            ("POST /v2/notifications HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400, "invalidHost"),
            ("POST /v2/notifications HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n", 400, "invalidHost"),
            ("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405, "methodNotAllowed"),
            ("OPTIONS /v2/notifications HTTP/1.1\r\nHost: x\r\n\r\n", 405, "methodNotAllowed"),
            ("PROPFIND /v2/notifications HTTP/1.1\r\nHost: x\r\n\r\n", 405, "methodNotAllowed"),
            ("TRACE /v2/notifications HTTP/1.1\r\nHost: x\r\n\r\n", 405, "methodNotAllowed"),
        ]
        for item in cases {
            let connection = try RawConnection(port: ingest.port)
            #expect(connection.send(Array(item.request.utf8)))
            let answer = connection.read(seconds: 5)
            // A response to CONNECT carries no body in HTTP/1.1 framing (NIO's encoder drops it): the status says it.
            let bodyExpected = !item.request.hasPrefix("CONNECT")
            #expect(answer.hasPrefix("HTTP/1.1 \(item.status)") && (!bodyExpected || answer.contains("\"error\":\"\(item.code)\"")), "\(item.request.debugDescription) → \(answer)")
        }
        try await expectCounted(ingest, status: 400, code: "malformedRequest")
        try await expectCounted(ingest, status: 400, code: "invalidHost")
        try await expectCounted(ingest, status: 405, code: "methodNotAllowed")
        try await ingest.stop()
    }

    @Test("SIGTERM: readiness fails first while POSTs are still answered for the drain period, then the server stops")
    func shutdownDrain() async throws {
        let bootstrap = try RequiredServices.bootstrap
        let drain = ShutdownDrain(period: .seconds(2))
        let ingest = try await RunningIngest.start(bootstrap: bootstrap, drain: drain)
        let connection = HTTPTestConnection(port: ingest.port)
        #expect(try await connection.awaitStatus(200, path: "/health/ready") == 200)
        await ingest.beginShutdown()
        var draining = false
        for _ in 0..<50 where !draining {
            draining = drain.isDraining
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(draining)
        #expect(try await HTTPTestConnection(port: ingest.port).send(method: "GET", path: "/health/ready").status == 503, "not ready while draining")
        let body = Array(#"{"signedPayload":"eyJh.eyJi.c2ln"}"#.utf8)
        #expect(try await HTTPTestConnection(port: ingest.port).send(path: "/v2/notifications", headers: ["Content-Type": "application/json"], body: body).status == 200,
            "a POST during the drain is still stored and answered")
        try await ingest.stop()
    }

    @Test("readiness probes reuse one broker probe while it is fresh")
    func readinessCache() async throws {
        let calls = Counter()
        let probe = CachedProbe(ttl: .seconds(60)) {
            calls.increment()
            try? await Task.sleep(for: .milliseconds(50))
            return true
        }
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<500 { group.addTask { await probe.value() } }
            for await answer in group { #expect(answer) }
        }
        #expect(calls.value == 1, "\(calls.value) probes for 500 readiness requests")
        let expiring = CachedProbe(ttl: .zero) {
            calls.increment()
            return false
        }
        #expect(await expiring.value() == false)
        #expect(await expiring.value() == false)
        #expect(calls.value == 3, "an expired answer is probed again")
    }

    func expectCounted(_ ingest: RunningIngest, status: Int, code: String) async throws {
        let metrics = try await HTTPTestConnection(port: ingest.port).send(method: "GET", path: "/metrics").bodyText
        let line = metrics.split(separator: "\n").first { $0.hasPrefix("ingest_requests_total") && $0.contains("status=\"\(status)\"") && $0.contains("error=\"\(code)\"") }
        #expect(line != nil, "ingest_requests_total{status=\"\(status)\",error=\"\(code)\"} missing")
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

