@testable import Console
import Foundation
import Testing

/// The console's sign-in rules in isolation (issue 51), each a defect reproduced against the code before it: limits
/// checked before bcrypt but counted after it, a lockout anyone could cause, the client-written leftmost
/// `X-Forwarded-For` trusted, and `next=/%09/evil.example` leaving the origin.
@Suite("Console sign-in hardening")
struct SignInHardeningTests {
    @Test("attempts count as they start: 100 concurrent tries on one account and address get 10 checks, the rest wait")
    func concurrentAttemptsReserve() {
        let limiter = LoginLimiter(window: .seconds(900))
        var tickets: [LoginLimiter.Ticket] = []
        var refused = 0
        for _ in 0..<100 {
            switch limiter.begin(hard: [("address:a", 50), ("pair:x|a", 10)], delayed: ("account:x", 10)) {
            case .success(let ticket): tickets.append(ticket)
            case .failure: refused += 1
            }
        }
        #expect(tickets.count == 10 && refused == 90)
        for ticket in tickets { limiter.finish(ticket, failed: true) }
        if case .success = limiter.begin(hard: [("address:a", 50), ("pair:x|a", 10)], delayed: ("account:x", 10)) {
            Issue.record("the eleventh failure in the window must wait")
        }
    }

    @Test("failures from elsewhere delay an account, never lock it: the operator waits at most a minute, from another address")
    func growingDelayNotLockout() {
        let limiter = LoginLimiter(window: .seconds(900))
        var now = ContinuousClock.now
        // An attacker fails 40 times on the account, from 40 addresses (each under its own limits).
        for attacker in 0..<40 {
            now += .seconds(61)
            guard case .success(let ticket) = limiter.begin(hard: [("address:\(attacker)", 50), ("pair:op|\(attacker)", 10)], delayed: ("account:op", 10), now: now)
            else {
                Issue.record("attempt \(attacker) was refused although a minute passed")
                continue
            }
            limiter.finish(ticket, failed: true, now: now)
        }
        // Right after the last failure the operator waits; never more than the maximum delay.
        guard case .failure(let wait) = limiter.begin(hard: [("address:office", 50), ("pair:op|office", 10)], delayed: ("account:op", 10), now: now) else {
            Issue.record("no delay after 40 failures")
            return
        }
        #expect(wait.seconds <= 61)
        now += .seconds(61)
        guard case .success(let ticket) = limiter.begin(hard: [("address:office", 50), ("pair:op|office", 10)], delayed: ("account:op", 10), now: now) else {
            Issue.record("the operator is locked out")
            return
        }
        limiter.finish(ticket, failed: false, clearing: ["pair:op|office", "account:op"], now: now)
        if case .failure = limiter.begin(hard: [("address:office", 50), ("pair:op|office", 10)], delayed: ("account:op", 10), now: now) {
            Issue.record("a success clears the account's delay")
        }
    }

    @Test("X-Forwarded-For is read from the right: the client is the address the nearest trusted proxy saw")
    func forwardedFor() {
        let oneProxy = ClientAddress(trustedProxies: [], trustForwardedFor: true)
        #expect(oneProxy.resolve(peer: "10.0.0.5", forwardedFor: "1.2.3.4, 203.0.113.9") == "203.0.113.9", "the leftmost entry is the client's to write")
        let named = ClientAddress(trustedProxies: [AddressRange("10.0.0.0/8")!, AddressRange("192.0.2.7")!], trustForwardedFor: false)
        #expect(named.resolve(peer: "10.0.0.5", forwardedFor: "6.6.6.6, 198.51.100.4, 192.0.2.7") == "198.51.100.4")
        #expect(named.resolve(peer: "198.51.100.99", forwardedFor: "6.6.6.6") == "198.51.100.99", "a peer that is not our proxy is the client")
        let untrusting = ClientAddress(trustedProxies: [], trustForwardedFor: false)
        #expect(untrusting.resolve(peer: "198.51.100.99", forwardedFor: "6.6.6.6") == "198.51.100.99")
        #expect(AddressRange("::1")!.contains("::1") && !AddressRange("10.0.0.0/8")!.contains("11.0.0.1"))
    }

    @Test("next stays on this origin: no tab, newline, backslash or protocol-relative path")
    func safeNext() {
        for bad in ["/\t/evil.example", "//evil.example", "/\\evil.example", "https://evil.example", "/\n/evil.example", " /x", "/x\u{7F}", "evil"] {
            #expect(ConsolePages.safeNext(bad) == "/", "\(bad.debugDescription)")
        }
        for good in ["/", "/subscriptions/1000?before=5", "/customers/abc%2Fdef"] {
            #expect(ConsolePages.safeNext(good) == good)
        }
    }

    @Test("a dead-letters page renders each payload cut at 2 KiB, saying how much was left out")
    func boundedPayloads() {
        let long = String(repeating: "é", count: 3_000)  // 6 000 bytes, two bytes a character
        let cut = ConsolePages.excerpt(long)
        #expect(cut.utf8.count < 2_200 && cut.contains("more bytes"), "\(cut.utf8.count)")
        #expect(ConsolePages.excerpt("short") == "short")
        #expect(ConsolePages.deadLettersPerPage == 50)
    }
}
