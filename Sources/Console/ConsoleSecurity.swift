import EntitlementStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdBcrypt
import NIOCore
import Synchronization

/// What every console answer carries: no script, no framing, no sniffing, no caching, no referrer.
enum ConsoleHeaders {
    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func apply(to headers: inout HTTPFields) {
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        headers[.cacheControl] = "no-store"
    }
}

/// The session cookie: `HttpOnly`, `SameSite=Strict`, `Secure`, path `/`; the token is random (256 bits) and only its
/// SHA-256 is stored.
enum SessionCookie {
    static let name = "console_session"

    static func set(_ token: String) -> String {
        "\(name)=\(token); Path=/; HttpOnly; SameSite=Strict; Secure"
    }

    static let cleared = "\(name)=; Path=/; HttpOnly; SameSite=Strict; Secure; Max-Age=0"
}

/// Failed logins per key (an address, an account) within a window: over the limit, a login is refused (429)
/// before its password is checked. In memory, per console process: with N replicas an attacker gets N times the
/// attempts, still bounded; bcrypt's cost bounds the rate of each.
final class LoginLimiter: Sendable {
    let window: Duration
    private let failures = Mutex<[String: [ContinuousClock.Instant]]>([:])

    init(window: Duration) {
        self.window = window
    }

    /// Seconds until `key` may try again (it has had `attempts` failures in the window), or nil when it may now.
    func retryAfter(_ key: String, limit attempts: Int, now: ContinuousClock.Instant = .now) -> Int? {
        failures.withLock { failures in
            let recent = (failures[key] ?? []).filter { now - $0 < window }
            failures[key] = recent.isEmpty ? nil : recent
            guard recent.count >= attempts, let oldest = recent.first else { return nil }
            return max(1, Int((window - (now - oldest)).components.seconds) + 1)
        }
    }

    func recordFailure(_ keys: [String], now: ContinuousClock.Instant = .now) {
        failures.withLock { failures in
            for key in keys { failures[key, default: []].append(now) }
            // Bounded: an address flood cannot grow the table without end.
            if failures.count > 100_000 { failures.removeAll() }
        }
    }

    func reset(_ key: String) {
        _ = failures.withLock { $0.removeValue(forKey: key) }
    }
}

/// An `application/x-www-form-urlencoded` body: every value of each name, in order.
struct FormBody {
    var values: [String: [String]] = [:]

    init(_ text: String) {
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = Self.decode(parts[0])
            let value = parts.count > 1 ? Self.decode(parts[1]) : ""
            values[name, default: []].append(value)
        }
    }

    static func decode(_ text: Substring) -> String {
        String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
    }

    subscript(_ name: String) -> String? { values[name]?.first }
    func all(_ name: String) -> [String] { values[name] ?? [] }
}

/// Constant-time comparison of two tokens.
func tokensEqual(_ a: String, _ b: String) -> Bool {
    let x = Array(a.utf8), y = Array(b.utf8)
    guard x.count == y.count else { return false }
    var difference: UInt8 = 0
    for (p, q) in zip(x, y) { difference |= p ^ q }
    return difference == 0
}

/// Operators' passwords: generated (shown once by `pipelinectl operators`), stored only as a bcrypt hash.
public enum OperatorPassword {
    /// bcrypt's work factor: ≈ 0.2 s a check on these machines, which bounds guessing even past the login limits.
    public static let cost: UInt8 = 12

    /// 24 characters of base64url from 256 random bits (144 bits kept).
    public static func generate() -> String { String(ConsoleStore.randomToken().prefix(24)) }

    public static func hash(_ password: String) -> String { Bcrypt.hash(password, cost: cost) }
}

/// A request's context with the peer's address: the login limiter counts failures per address. Behind a proxy
/// every request comes from the proxy, so `CONSOLE_TRUST_FORWARDED_FOR=true` takes the first `X-Forwarded-For`
/// address instead (only when the proxy sets it: a client could write its own otherwise).
struct ConsoleRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
