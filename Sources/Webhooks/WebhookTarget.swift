import AppStoreNotifications
import EntitlementStore
import Foundation
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// Why a webhook URL is refused: at `pipelinectl webhooks add` and again before every delivery.
package struct WebhookTargetError: Error, Sendable, Hashable, CustomStringConvertible {
    package var code: String
    package var reason: String
    package var description: String { "\(code): \(reason)" }
}

/// Where a webhook may be sent. No SSRF into the operator's network: only `https` unless the endpoint was added
/// with `--allow-http`; every address the host name resolves to must be public unless
/// `WEBHOOKS_ALLOW_PRIVATE_TARGETS` is true (a name that resolves to 127.0.0.1 is refused like the address
/// itself). Checked after DNS resolution at every delivery; redirects are never followed.
package struct WebhookTarget: Sendable {
    package var url: URL
    package var host: String

    /// Parses and checks `text` (scheme, host, no credentials), without resolving it.
    package static func parse(_ text: String, allowHTTP: Bool) throws(WebhookTargetError) -> WebhookTarget {
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

    /// What kind of address a target resolved to: only `public` is delivered to in production;
    /// `privateNetwork` (loopback, RFC 1918, shared address space, unique local) also with
    /// `WEBHOOKS_ALLOW_PRIVATE_TARGETS` (tests, local compose); `special` never (link-local with the cloud metadata
    /// address, NAT64 and 6to4 that reach IPv4 networks behind a translator, site-local, documentation, multicast,
    /// and the other special-purpose ranges of IANA's registries).
    package enum AddressClass: String, Sendable, Hashable {
        case `public`, privateNetwork, special
    }

    /// One address the host resolved to, with its class: the one a delivery connects to is one of these, never a
    /// second resolution's answer (DNS rebinding).
    package struct ResolvedAddress: Sendable, Hashable {
        package var text: String
        package var addressClass: AddressClass
    }

    /// Resolves the host (getaddrinfo on NIO's blocking pool, never the cooperative pool; abandoned at `deadline`)
    /// and refuses it when any address is not deliverable: a name with one private address among public ones is
    /// refused too. Returns the addresses, the first to connect to.
    package func checkAddresses(allowPrivate: Bool, deadline: ContinuousClock.Instant = .now + .seconds(10)) async throws(WebhookTargetError) -> [ResolvedAddress] {
        let host = self.host
        let resolved: Result<[ResolvedAddress], WebhookTargetError>
        if let literal = Self.literal(host) {
            resolved = .success([literal])
        } else {
            resolved = await Self.resolveBeforeDeadline(host, deadline: deadline)
        }
        let addresses = try resolved.get()
        for address in addresses where address.addressClass != .public {
            if address.addressClass == .privateNetwork && allowPrivate { continue }
            throw WebhookTargetError(
                code: address.addressClass == .special ? "special_address" : "private_address",
                reason: "\(UntrustedText.quoted(host, limit: 100)) \(Self.literal(host) == nil ? "resolves to" : "is") \(address.text), "
                    + (address.addressClass == .special
                        ? "a special-purpose address (IANA registry) that is never delivered to"
                        : "which is not a public address (WEBHOOKS_ALLOW_PRIVATE_TARGETS=true allows it)"))
        }
        return addresses
    }

    /// The host as an address when it is an IP literal (no resolution needed or wanted).
    static func literal(_ host: String) -> ResolvedAddress? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            let bytes = withUnsafeBytes(of: v4) { Array($0) }
            return ResolvedAddress(text: bytes.map(String.init).joined(separator: "."), addressClass: classify(ipv4: bytes))
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            let bytes = withUnsafeBytes(of: v6) { Array($0) }
            return ResolvedAddress(text: ipv6Text(bytes), addressClass: classify(ipv6: bytes))
        }
        return nil
    }

    /// getaddrinfo cannot be cancelled: it runs on a thread of its own, one per host at a time (`HostResolver`), and
    /// its answer is dropped for an attempt whose deadline came first (the thread finishes on its own).
    static func resolveBeforeDeadline(
        _ host: String, deadline: ContinuousClock.Instant, resolver: HostResolver = .shared
    ) async -> Result<[ResolvedAddress], WebhookTargetError> {
        do {
            return try await withDeadline(ContinuousClock.now.duration(to: deadline), "resolving a webhook host") {
                await resolver.resolve(host)
            }
        } catch {
            let why = error is StepTimedOut ? "did not resolve before the attempt's deadline" : "could not be resolved: \(error)"
            return .failure(WebhookTargetError(code: "unresolvable", reason: "\(UntrustedText.quoted(host, limit: 100)) \(why)"))
        }
    }

    /// getaddrinfo, blocking: each address with its class.
    static func resolve(_ host: String) -> Result<[ResolvedAddress], WebhookTargetError> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let first = list else {
            return .failure(WebhookTargetError(code: "unresolvable", reason: "\(UntrustedText.quoted(host, limit: 100)) does not resolve: \(String(cString: gai_strerror(status)))"))
        }
        defer { freeaddrinfo(list) }
        var results: [ResolvedAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if let address = entry.pointee.ai_addr {
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    let bytes = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) } }
                    results.append(ResolvedAddress(text: bytes.map(String.init).joined(separator: "."), addressClass: classify(ipv4: bytes)))
                case AF_INET6:
                    let bytes = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) } }
                    results.append(ResolvedAddress(text: ipv6Text(bytes), addressClass: classify(ipv6: bytes)))
                default:
                    break
                }
            }
            cursor = entry.pointee.ai_next
        }
        var unique: [ResolvedAddress] = []
        for result in results where !unique.contains(result) { unique.append(result) }
        return unique.isEmpty ? .failure(WebhookTargetError(code: "unresolvable", reason: "\(UntrustedText.quoted(host, limit: 100)) has no address")) : .success(unique)
    }

    /// IANA's IPv4 special-purpose registry (RFC 6890 and later) and multicast: loopback, RFC 1918, the shared
    /// address space (100.64/10) and benchmarking (198.18/15) are `privateNetwork`; "this network", link-local
    /// (169.254/16, the cloud metadata service), IETF protocol assignments (192.0.0/24), the documentation
    /// networks, AS112, AMT, the 6to4 relay anycast, multicast and the reserved 240/4 are `special`.
    package static func classify(ipv4 b: [UInt8]) -> AddressClass {
        guard b.count == 4 else { return .special }
        switch (b[0], b[1], b[2]) {
        case (10, _, _), (127, _, _), (192, 168, _), (100, 64...127, _), (172, 16...31, _), (198, 18...19, _): return .privateNetwork
        case (0, _, _), (169, 254, _), (192, 0, 0), (192, 0, 2), (192, 31, 196), (192, 52, 193), (192, 88, 99), (192, 175, 48), (198, 51, 100),
            (203, 0, 113), (224..., _, _):
            return .special
        default: return .public
        }
    }

    /// IANA's IPv6 special-purpose registry: `::1` and unique local (fc00::/7) are `privateNetwork`; the
    /// unspecified address, IPv4-compatible (::/96), NAT64 (64:ff9b::/96, 64:ff9b:1::/48), discard (100::/64),
    /// IETF protocol assignments (2001::/23, Teredo among them), documentation (2001:db8::/32, 3fff::/20), 6to4
    /// (2002::/16), SRv6 SIDs (5f00::/16), link-local (fe80::/10), site-local (fec0::/10) and multicast (ff00::/8)
    /// are `special`; IPv4-mapped (::ffff:0:0/96) is its IPv4 address's class.
    package static func classify(ipv6 b: [UInt8]) -> AddressClass {
        guard b.count == 16 else { return .special }
        let word = { (i: Int) -> UInt16 in UInt16(b[2 * i]) << 8 | UInt16(b[2 * i + 1]) }
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff { return classify(ipv4: Array(b[12..<16])) }
        if b[0..<15].allSatisfy({ $0 == 0 }) && b[15] == 1 { return .privateNetwork }
        if b[0..<12].allSatisfy({ $0 == 0 }) { return .special }  // :: and IPv4-compatible
        if word(0) == 0x64 && word(1) == 0xff9b && ((2...5).allSatisfy { word($0) == 0 } || word(2) == 1) { return .special }
        if word(0) == 0x0100 && word(1) == 0 && word(2) == 0 && word(3) == 0 { return .special }
        if word(0) == 0x2001 && word(1) < 0x0200 { return .special }
        if word(0) == 0x2001 && word(1) == 0x0db8 { return .special }
        if word(0) == 0x3fff && word(1) < 0x1000 { return .special }
        if word(0) == 0x2002 || word(0) == 0x5f00 { return .special }
        if b[0] & 0xfe == 0xfc { return .privateNetwork }
        if b[0] == 0xfe && b[1] & 0x80 == 0x80 { return .special }  // fe80::/10 link-local, fec0::/10 site-local
        if b[0] == 0xff { return .special }
        return .public
    }

    /// Whether deliveries may go to this IPv4 address without `WEBHOOKS_ALLOW_PRIVATE_TARGETS`.
    package static func isPublic(ipv4 b: [UInt8]) -> Bool { classify(ipv4: b) == .public }

    /// Whether deliveries may go to this IPv6 address without `WEBHOOKS_ALLOW_PRIVATE_TARGETS`.
    package static func isPublic(ipv6 b: [UInt8]) -> Bool { classify(ipv6: b) == .public }

    /// The compressed text form (RFC 5952), as inet_ntop writes it.
    static func ipv6Text(_ b: [UInt8]) -> String {
        var address = in6_addr()
        withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: b) }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
