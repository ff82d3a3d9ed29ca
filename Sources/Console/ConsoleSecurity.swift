import EntitlementStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdBcrypt
import NIOCore
import ServiceRuntime
import Synchronization

/// What every console answer carries: no script, no framing, no sniffing, no caching, no referrer to another site.
/// (`same-origin`, not `no-referrer`: with `no-referrer` a browser sends `Origin: null` even on our own forms, and the
/// sign-in form's cross-site check needs our origin there.)
enum ConsoleHeaders {
    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func apply(to headers: inout HTTPFields) {
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
        headers[.cacheControl] = "no-store"
    }
}

/// The session cookie: `HttpOnly`, `SameSite=Strict`, `Secure`, path `/`; the token is random (256 bits) and only its
/// SHA-256 is stored.
/// The read-your-writes token of the console's actions (docs/scale.md): the action's own while its answer renders,
/// then a header and a short-lived cookie (`POSTGRES_READ_STICKY`) that the next pages' reads carry.
enum ConsoleReadToken {
    @TaskLocal static var current: ConsistencyToken?
    static let header = HTTPField.Name("Consistency-Token")!
    static let cookie = "consistency_token"

    static func setCookie(_ token: ConsistencyToken, seconds: Int64) -> String {
        "\(cookie)=\(token); Path=/; HttpOnly; SameSite=Strict; Secure; Max-Age=\(seconds)"
    }
}

enum SessionCookie {
    static let name = "console_session"

    static func set(_ token: String) -> String {
        "\(name)=\(token); Path=/; HttpOnly; SameSite=Strict; Secure"
    }

    static let cleared = "\(name)=; Path=/; HttpOnly; SameSite=Strict; Secure; Max-Age=0"
}

/// Sign-in attempts per key within a window, counted *before* the password is checked: each attempt reserves its
/// place (`begin`) and a failure keeps it (`finish`), so a burst of concurrent wrong passwords gets no more checks than
/// the limit (the rest are 429 at once). In memory, per console process: with N replicas an attacker gets N times
/// the attempts, still bounded; bcrypt's cost bounds the rate of each.
///
/// Hard limits per client address and per (account, address); per account alone, a growing delay instead of a lock
/// (1 s, 2 s, 4 s … at most 60 s after each failure past the free attempts), so nobody can lock an operator out by
/// failing on purpose from elsewhere: the operator waits a minute at most.
final class LoginLimiter: Sendable {
    let window: Duration
    /// The longest delay the account's growing delay reaches.
    static let maximumDelay: Duration = .seconds(60)

    struct Entry {
        var failures: [ContinuousClock.Instant] = []
        var inFlight = 0
    }

    /// What `begin` reserved; give it back to `finish`.
    struct Ticket: Sendable {
        fileprivate let keys: [String]
    }

    private let entries = Mutex<[String: Entry]>([:])

    init(window: Duration) {
        self.window = window
    }

    /// Reserves an attempt on every key, or answers how many seconds to wait: a hard key is full when its failures
    /// in the window and its attempts in flight reach its limit; the delayed key when its failures past `free` call
    /// for a delay that has not passed since its last failure (or an attempt of it is in flight past `free`).
    func begin(hard: [(key: String, limit: Int)], delayed: (key: String, free: Int), now: ContinuousClock.Instant = .now) -> Result<Ticket, Wait> {
        entries.withLock { entries in
            func recent(_ key: String) -> Entry {
                var entry = entries[key] ?? Entry()
                entry.failures = entry.failures.filter { now - $0 < window }
                return entry
            }
            var wait = 0
            for (key, limit) in hard {
                let entry = recent(key)
                if entry.failures.count + entry.inFlight >= limit {
                    let oldest = entry.failures.first.map { max(1, Int((window - (now - $0)).components.seconds) + 1) } ?? 1
                    wait = max(wait, entry.failures.count >= limit ? oldest : 1)
                }
            }
            let account = recent(delayed.key)
            let past = account.failures.count + account.inFlight - delayed.free
            if past >= 0 {
                if account.inFlight > 0 {
                    wait = max(wait, 1)
                } else if let last = account.failures.last {
                    let delay = min(Self.maximumDelay, .seconds(1 << min(past, 10)))
                    if now - last < delay { wait = max(wait, Int((delay - (now - last)).components.seconds) + 1) }
                }
            }
            guard wait == 0 else { return .failure(Wait(seconds: wait)) }
            let keys = hard.map(\.key) + [delayed.key]
            for key in keys {
                var entry = recent(key)
                entry.inFlight += 1
                entries[key] = entry
            }
            // Bounded: an address flood cannot grow the table without end.
            if entries.count > 100_000 { entries = entries.filter { $0.value.inFlight > 0 } }
            return .success(Ticket(keys: keys))
        }
    }

    /// Ends an attempt: a failure stays counted on every key; a success clears `clearing` (the account's keys).
    func finish(_ ticket: Ticket, failed: Bool, clearing: [String] = [], now: ContinuousClock.Instant = .now) {
        entries.withLock { entries in
            for key in ticket.keys {
                guard var entry = entries[key] else { continue }
                entry.inFlight = max(0, entry.inFlight - 1)
                if failed { entry.failures.append(now) }
                entries[key] = entry
            }
            if !failed { for key in clearing { entries[key]?.failures = [] } }
        }
    }

    struct Wait: Error {
        var seconds: Int
    }
}

/// The client's address for the limiter: the connection's peer, or, behind trusted proxies, the address the nearest
/// trusted proxy saw: `X-Forwarded-For` is read from the right (each proxy appends the address it saw), skipping the
/// trusted proxies, never its client-written leftmost entry.
struct ClientAddress {
    /// `CONSOLE_TRUSTED_PROXIES`: addresses or CIDR ranges of our proxies. Empty with `CONSOLE_TRUST_FORWARDED_FOR`:
    /// the peer alone is trusted (one proxy in front).
    let trustedProxies: [AddressRange]
    let trustForwardedFor: Bool

    func resolve(peer: String?, forwardedFor: String?) -> String {
        guard let peer else { return "unknown" }
        guard isTrusted(peer), let forwardedFor else { return peer }
        let hops = forwardedFor.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        // From the nearest proxy backwards: the first address that is not one of ours is the client.
        for hop in hops.reversed() where !(trustedProxies.contains { $0.contains(hop) }) {
            return String(hop.prefix(64))
        }
        return hops.first.map { String($0.prefix(64)) } ?? peer
    }

    func isTrusted(_ address: String) -> Bool {
        trustedProxies.isEmpty ? trustForwardedFor : trustedProxies.contains { $0.contains(address) }
    }
}

/// An IPv4 or IPv6 address or CIDR range (`10.0.0.0/8`, `::1`).
struct AddressRange: Sendable, Hashable {
    let network: [UInt8]
    let prefix: Int

    init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1).map(String.init)
        guard let bytes = Self.bytes(parts[0]) else { return nil }
        let bits = parts.count > 1 ? Int(parts[1]) : bytes.count * 8
        guard let bits, (0...(bytes.count * 8)).contains(bits) else { return nil }
        network = bytes
        prefix = bits
    }

    func contains(_ address: String) -> Bool {
        guard let bytes = Self.bytes(address), bytes.count == network.count else { return false }
        for bit in 0..<prefix where (bytes[bit / 8] >> (7 - bit % 8)) & 1 != (network[bit / 8] >> (7 - bit % 8)) & 1 { return false }
        return true
    }

    static func bytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
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

/// A request's context with the peer's address: the login limiter counts failures per address (behind proxies,
/// `ClientAddress` reads `X-Forwarded-For` from the right).
typealias ConsoleRequestContext = PeerAddressRequestContext
