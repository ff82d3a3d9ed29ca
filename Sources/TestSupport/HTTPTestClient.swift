import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A minimal HTTP/1.1 client with keep-alive, for tests and benchmarks that POST to our own servers on loopback.
/// It speaks only what our servers answer (Content-Length bodies).
///
/// Its socket I/O blocks, so it runs on a serial dispatch queue of its own and is awaited from async code: a
/// blocking call on Swift's cooperative pool (two threads on these machines) would starve the very server tasks
/// that must answer it.
public final class HTTPTestConnection: @unchecked Sendable {
    public struct Response: Sendable {
        public var status: Int
        public var headers: [String: String]
        public var body: [UInt8]
        public var bodyText: String { String(decoding: body, as: UTF8.self) }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    let port: Int
    private var descriptor: Int32 = -1
    private var buffer: [UInt8] = []
    /// All socket work happens here, one request at a time.
    private let queue = DispatchQueue(label: "http-test-connection")

    public init(port: Int) {
        self.port = port
    }

    deinit { disconnect() }

    public func disconnect() {
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
        buffer = []
    }

    private func connect(timeoutSeconds: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // A server may answer (and stop reading) before a large body is sent: give up writing then, and read.
        var sendTimeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))
        var one: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            disconnect()
            throw Failure(description: "connect to 127.0.0.1:\(port) failed: errno \(errno)")
        }
    }

    /// GETs `path` until it answers `status` or `within` passes; returns the last status. For readiness right after a
    /// start: ready means the broker answered, which a loaded machine may take longer than one probe's second to see
    /// (a fresh-clone CI run found ingest not ready on its first probe), and not ready then is right.
    public func awaitStatus(_ status: Int, path: String, within: Duration = .seconds(20)) async throws -> Int {
        let deadline = ContinuousClock.now + within
        var last = try await send(method: "GET", path: path).status
        while last != status, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(250))
            last = try await send(method: "GET", path: path).status
        }
        return last
    }

    /// Sends one request and reads its response, off the cooperative pool.
    public func send(method: String = "POST", path: String, headers: [String: String] = [:], body: [UInt8] = [], timeoutSeconds: Int = 30) async throws -> Response {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try self.sendBlocking(method: method, path: path, headers: headers, body: body, timeoutSeconds: timeoutSeconds) })
            }
        }
    }

    /// Sends one request and reads its response, blocking the calling thread (never call from async code).
    /// Reconnects once if a kept-alive connection was closed.
    public func sendBlocking(method: String = "POST", path: String, headers: [String: String] = [:], body: [UInt8] = [], timeoutSeconds: Int = 30) throws -> Response {
        for attempt in 0..<2 {
            if descriptor < 0 { try connect(timeoutSeconds: timeoutSeconds) }
            var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Length: \(body.count)\r\n"
            for (name, value) in headers { head += "\(name): \(value)\r\n" }
            head += "\r\n"
            let request = Array(head.utf8) + body
            let wroteAll = writeAll(request)
            // Even if the write stopped early (the server refused and closed), its answer may be waiting.
            if let response = try readResponse() {
                if !wroteAll || response.headers["connection"]?.lowercased() == "close" { disconnect() }
                return response
            }
            disconnect()
            if attempt == 1 { break }
        }
        throw Failure(description: "no response from 127.0.0.1:\(port)")
    }

    private func writeAll(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    private func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        if count <= 0 { return false }
        buffer += chunk[..<count]
        return true
    }

    private func readResponse() throws -> Response? {
        let separator: [UInt8] = [13, 10, 13, 10]
        var headerEnd: Int?
        while headerEnd == nil {
            if buffer.count >= 4 {
                headerEnd = (0...(buffer.count - 4)).first { buffer[$0..<($0 + 4)].elementsEqual(separator) }
            }
            if headerEnd == nil, !fill() { return nil }
        }
        let head = String(decoding: buffer[..<headerEnd!], as: UTF8.self)
        buffer.removeFirst(headerEnd! + 4)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw Failure(description: "bad status line \(head)") }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        while buffer.count < length { if !fill() { return nil } }
        let body = Array(buffer[..<length])
        buffer.removeFirst(length)
        return Response(status: status, headers: headers, body: body)
    }
}

/// Many requests at once from many threads, each with its own kept-alive connection.
public enum HTTPLoad {
    public struct Outcome: Sendable {
        public var index: Int
        public var status: Int?
        /// Seconds from send to response.
        public var latency: Double
        public var error: String?
    }

    /// Sends `count` requests over `concurrency` connections; request `i` is `request(i)` (path, headers, body).
    /// `onAnswered(n)` is called from the sending threads after the n-th response.
    public static func run(
        port: Int, count: Int, concurrency: Int, timeoutSeconds: Int = 30,
        onAnswered: @escaping @Sendable (Int) -> Void = { _ in },
        request: @escaping @Sendable (Int) -> (path: String, headers: [String: String], body: [UInt8])
    ) async -> [Outcome] {
        let next = Atomic<Int>(0)
        let answered = Atomic<Int>(0)
        let results = Mutex<[Outcome]>([])
        let group = DispatchGroup()
        for _ in 0..<concurrency {
            group.enter()
            let thread = Thread {
                let connection = HTTPTestConnection(port: port)
                var local: [Outcome] = []
                while true {
                    let index = next.add(1, ordering: .relaxed).oldValue
                    if index >= count { break }
                    let (path, headers, body) = request(index)
                    let start = DispatchTime.now().uptimeNanoseconds
                    do {
                        let response = try connection.sendBlocking(path: path, headers: headers, body: body, timeoutSeconds: timeoutSeconds)
                        local.append(Outcome(index: index, status: response.status, latency: Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9))
                        onAnswered(answered.add(1, ordering: .relaxed).newValue)
                    } catch {
                        connection.disconnect()
                        local.append(Outcome(index: index, status: nil, latency: Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9, error: "\(error)"))
                    }
                }
                results.withLock { $0 += local }
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        // Wait without blocking a cooperative thread: the server under test needs them.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            group.notify(queue: .global()) { continuation.resume() }
        }
        return results.withLock { $0 }.sorted { $0.index < $1.index }
    }
}
