import AppStoreNotifications
import Foundation
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// Why a webhook URL is refused: at `pipelinectl webhooks add` and again before every delivery.
public struct WebhookTargetError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: String
    public var reason: String
    public var description: String { "\(code): \(reason)" }
}

/// Where a webhook may be sent. No SSRF into the operator's network: only `https` unless the endpoint was added
/// with `--allow-http`; every address the host name resolves to must be public unless
/// `WEBHOOKS_ALLOW_PRIVATE_TARGETS` is true (a name that resolves to 127.0.0.1 is refused like the address
/// itself). Checked after DNS resolution at every delivery; redirects are never followed.
public struct WebhookTarget: Sendable {
    public var url: URL
    public var host: String

    /// Parses and checks `text` (scheme, host, no credentials), without resolving it.
    public static func parse(_ text: String, allowHTTP: Bool) throws(WebhookTargetError) -> WebhookTarget {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            throw WebhookTargetError(code: "invalid_url", reason: "\(UntrustedText.quoted(text, limit: 200)) is not an absolute http(s) URL with a host")
        }
        guard scheme == "https" || (scheme == "http" && allowHTTP) else {
            throw WebhookTargetError(
                code: "insecure_url", reason: scheme == "http" ? "plain http needs --allow-http (tests and local compose only)" : "only https URLs are delivered to")
        }
        guard url.user == nil, url.password == nil else {
            throw WebhookTargetError(code: "invalid_url", reason: "credentials in the URL are not accepted; the signature authenticates the sender")
        }
        return WebhookTarget(url: url, host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host)
    }

    /// Resolves the host and refuses it when any address is private, loopback, link-local or otherwise not
    /// public (unless `allowPrivate`). Returns the addresses.
    public func checkAddresses(allowPrivate: Bool) async throws(WebhookTargetError) -> [String] {
        let host = self.host
        let resolved: Result<[(String, Bool)], WebhookTargetError> = await withCheckedContinuation { continuation in
            NIOThreadPool.singleton.submit { _ in continuation.resume(returning: Self.resolve(host)) }
        }
        let addresses = try resolved.get()
        if !allowPrivate, let address = addresses.first(where: { !$0.1 }) {
            throw WebhookTargetError(
                code: "private_address",
                reason: "\(UntrustedText.quoted(host, limit: 100)) resolves to \(address.0), which is not a public address (WEBHOOKS_ALLOW_PRIVATE_TARGETS=true allows it)")
        }
        return addresses.map(\.0)
    }

    /// getaddrinfo, blocking: each address with whether it is public.
    static func resolve(_ host: String) -> Result<[(String, Bool)], WebhookTargetError> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let first = list else {
            return .failure(WebhookTargetError(code: "unresolvable", reason: "\(UntrustedText.quoted(host, limit: 100)) does not resolve: \(String(cString: gai_strerror(status)))"))
        }
        defer { freeaddrinfo(list) }
        var results: [(String, Bool)] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if let address = entry.pointee.ai_addr {
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    let bytes = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) } }
                    results.append((bytes.map(String.init).joined(separator: "."), isPublic(ipv4: bytes)))
                case AF_INET6:
                    let bytes = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) } }
                    results.append((ipv6Text(bytes), isPublic(ipv6: bytes)))
                default:
                    break
                }
            }
            cursor = entry.pointee.ai_next
        }
        return results.isEmpty ? .failure(WebhookTargetError(code: "unresolvable", reason: "\(UntrustedText.quoted(host, limit: 100)) has no address")) : .success(results)
    }

    /// False for 0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0/24, 192.168/16, 198.18/15, 224/4 and above.
    public static func isPublic(ipv4 b: [UInt8]) -> Bool {
        guard b.count == 4 else { return false }
        switch (b[0], b[1]) {
        case (0, _), (10, _), (127, _), (169, 254), (192, 168): return false
        case (100, 64...127), (172, 16...31), (198, 18...19): return false
        case (192, 0) where b[2] == 0: return false
        case (224..., _): return false
        default: return true
        }
    }

    /// False for ::, ::1, fc00::/7 (unique local), fe80::/10 (link-local), ff00::/8 (multicast), and IPv4-mapped or
    /// -compatible addresses whose IPv4 address is not public.
    public static func isPublic(ipv6 b: [UInt8]) -> Bool {
        guard b.count == 16 else { return false }
        if b[0..<10].allSatisfy({ $0 == 0 }) && ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0)) {
            return isPublic(ipv4: Array(b[12..<16]))  // ::ffff:a.b.c.d, ::a.b.c.d (and :: and ::1 fall here: 0.0.0.x)
        }
        if b[0] & 0xfe == 0xfc || (b[0] == 0xfe && b[1] & 0xc0 == 0x80) || b[0] == 0xff { return false }
        return true
    }

    static func ipv6Text(_ b: [UInt8]) -> String {
        stride(from: 0, to: 16, by: 2).map { String(UInt16(b[$0]) << 8 | UInt16(b[$0 + 1]), radix: 16) }.joined(separator: ":")
    }
}
