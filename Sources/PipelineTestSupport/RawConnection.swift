import Foundation
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A plain TCP connection for requests no well-behaved client would send. Used by one test task at a time; its
/// blocking read runs on a thread of its own (`readUntilClosed`), hence `@unchecked Sendable`.
package final class RawConnection: @unchecked Sendable {
    private let descriptor: Int32

    package init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw HTTPTestConnection.Failure(description: "connect failed: \(errno)") }
    }

    deinit { close(descriptor) }

    /// False once the peer closed (or reset) the connection.
    package func send(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    /// What arrives within `seconds` (returns early once something arrived and the line went quiet for 0.3 s).
    package func read(seconds: Double) -> String {
        var collected: [UInt8] = []
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let wait = collected.isEmpty ? Int32(max(1, deadline.timeIntervalSinceNow * 1000)) : 300
            guard poll(&poller, 1, wait) > 0 else { if collected.isEmpty { continue } else { break } }
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { break }
            collected += buffer[0..<count]
        }
        return String(decoding: collected, as: UTF8.self)
    }

    /// Reads until the peer closes, at most `seconds`.
    /// What the server sends until it closes the connection or `seconds` pass. The wait blocks a thread of its own: on
    /// the cooperative pool (two threads here) it could starve the in-process server it waits for, which then never
    /// answers (an HTTP/1.0 request went unanswered for 5 s in a loaded CI run that way).
    package func readUntilClosed(seconds: Double) async -> (text: String, closed: Bool) {
        (try? await DedicatedThread.run { self.readUntilClosedBlocking(seconds: seconds) }) ?? ("", false)
    }

    private func readUntilClosedBlocking(seconds: Double) -> (text: String, closed: Bool) {
        var collected: [UInt8] = []
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { return (String(decoding: collected, as: UTF8.self), true) }
            collected += buffer[0..<count]
        }
        return (String(decoding: collected, as: UTF8.self), false)
    }
}
