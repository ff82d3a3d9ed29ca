import Foundation
import PipelineConfiguration
import Testing
import Webhooks

@Suite("Webhooks: Standard Webhooks signatures, target rules, retry schedule")
struct WebhookSigningTests {
    @Test("the signature of the Standard Webhooks specification's example, byte for byte")
    func specificationExample() {
        let body = Array(#"{"test": 2432232314}"#.utf8)
        let signature = WebhookSignature.sign(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(WebhookSignature.sign(id: "x", timestamp: 1, body: body, secret: "not-a-secret") == nil)
    }

    @Test("during a rotation both secrets sign; a receiver with either verifies; a wrong secret, body or stale timestamp does not")
    func rotation() {
        let old = WebhookSignature.generateSecret(), new = WebhookSignature.generateSecret()
        #expect(old.hasPrefix("whsec_") && WebhookSignature.keyBytes(old)?.count == 32 && old != new)
        let body = Array(#"{"id":"e1"}"#.utf8)
        let header = WebhookSignature.header(id: "e1", timestamp: 1_000, body: body, secrets: [new, old])
        #expect(header.split(separator: " ").count == 2)
        #expect(WebhookSignature.verify(id: "e1", timestamp: 1_000, body: body, header: header, secret: old, now: 1_010))
        #expect(WebhookSignature.verify(id: "e1", timestamp: 1_000, body: body, header: header, secret: new, now: 1_010))
        #expect(!WebhookSignature.verify(id: "e1", timestamp: 1_000, body: body, header: header, secret: WebhookSignature.generateSecret(), now: 1_010))
        #expect(!WebhookSignature.verify(id: "e1", timestamp: 1_000, body: Array(#"{"id":"e2"}"#.utf8), header: header, secret: new, now: 1_010))
        #expect(!WebhookSignature.verify(id: "e1", timestamp: 1_000, body: body, header: header, secret: new, now: 2_000), "outside the tolerance")
        let endpoint = WebhookEndpoint(
            id: "we_1", url: "https://example.com", description: nil, bundleIds: [], environment: nil, eventTypes: [], allowHTTP: false, secret: new,
            previousSecret: old, previousSecretUntil: Date().addingTimeInterval(60))
        #expect(endpoint.signingSecrets() == [new, old])
        #expect(endpoint.signingSecrets(at: Date().addingTimeInterval(120)) == [new], "the overlap ended")
    }

    @Test("only https (http with --allow-http), no credentials; private, loopback and link-local addresses refused, also behind a name")
    func targets() async throws {
        #expect(throws: WebhookTargetError.self) { try WebhookTarget.parse("http://example.com/hook", allowHTTP: false) }
        #expect((try? WebhookTarget.parse("http://example.com/hook", allowHTTP: true)) != nil)
        #expect(throws: WebhookTargetError.self) { try WebhookTarget.parse("https://user:pw@example.com/hook", allowHTTP: false) }
        #expect(throws: WebhookTargetError.self) { try WebhookTarget.parse("ftp://example.com/", allowHTTP: true) }
        #expect(throws: WebhookTargetError.self) { try WebhookTarget.parse("not a url", allowHTTP: true) }
        for address in ["127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1", "198.18.0.1"] {
            let bytes = address.split(separator: ".").map { UInt8($0)! }
            #expect(!WebhookTarget.isPublic(ipv4: bytes), "\(address)")
        }
        for address in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "1.1.1.1"] {
            #expect(WebhookTarget.isPublic(ipv4: address.split(separator: ".").map { UInt8($0)! }), "\(address)")
        }
        func v6(_ groups: [UInt16]) -> [UInt8] { groups.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] } }
        #expect(!WebhookTarget.isPublic(ipv6: v6([0, 0, 0, 0, 0, 0, 0, 1])), "::1")
        #expect(!WebhookTarget.isPublic(ipv6: v6([0xfc00, 0, 0, 0, 0, 0, 0, 1])), "fc00::1")
        #expect(!WebhookTarget.isPublic(ipv6: v6([0xfe80, 0, 0, 0, 0, 0, 0, 1])), "fe80::1")
        #expect(!WebhookTarget.isPublic(ipv6: v6([0, 0, 0, 0, 0, 0xffff, 0x7f00, 0x0001])), "::ffff:127.0.0.1")
        #expect(WebhookTarget.isPublic(ipv6: v6([0x2001, 0x4860, 0, 0, 0, 0, 0, 0x8888])))
        // A name that resolves to loopback is refused like the address itself, unless private targets are allowed.
        let named = try WebhookTarget.parse("http://localhost:9/hook", allowHTTP: true)
        await #expect(throws: WebhookTargetError.self) { try await named.checkAddresses(allowPrivate: false) }
        #expect(try await named.checkAddresses(allowPrivate: true).isEmpty == false)
        let literal = try WebhookTarget.parse("http://127.0.0.1:9/hook", allowHTTP: true)
        do {
            _ = try await literal.checkAddresses(allowPrivate: false)
            Issue.record("127.0.0.1 was accepted")
        } catch {
            #expect(error.code == "private_address")
        }
    }

    @Test("special-purpose addresses (NAT64, 6to4, site-local, documentation, link-local, ...) are refused even where private targets are allowed; literals are not resolved")
    func specialPurposeTargets() async throws {
        let special = [
            "64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::1", "2002:7f00:1::1", "2002:808:808::1", "fec0::1", "fe80::1", "2001:db8::1", "2001::1",
            "3fff::1", "100::1", "5f00::1", "ff02::1", "::", "::7f00:1", "::ffff:169.254.169.254", "::ffff:0.0.0.0",
        ]
        for address in special {
            let target = try WebhookTarget.parse("http://[\(address)]:9/hook", allowHTTP: true)
            do {
                _ = try await target.checkAddresses(allowPrivate: true)
                Issue.record("\(address) was accepted")
            } catch {
                #expect(error.code == "special_address", "\(address): \(error)")
            }
        }
        for address in ["169.254.169.254", "0.0.0.0", "192.0.2.1", "198.51.100.7", "203.0.113.9", "240.0.0.1", "255.255.255.255", "224.0.0.1", "192.88.99.1"] {
            let target = try WebhookTarget.parse("http://\(address):9/hook", allowHTTP: true)
            await #expect(throws: WebhookTargetError.self, "\(address)") { try await target.checkAddresses(allowPrivate: true) }
        }
        // Private networks pass only with WEBHOOKS_ALLOW_PRIVATE_TARGETS; public ones always; the address returned is the literal itself.
        for address in ["::1", "fd00::1", "10.0.0.1", "127.0.0.1"] {
            let target = try WebhookTarget.parse("http://\(address.contains(":") ? "[\(address)]" : address):9/hook", allowHTTP: true)
            await #expect(throws: WebhookTargetError.self, "\(address)") { try await target.checkAddresses(allowPrivate: false) }
            #expect(try await target.checkAddresses(allowPrivate: true).map(\.text) == [address])
        }
        for address in ["2001:4860::8888", "2606:4700::1111", "::ffff:8.8.8.8"] {
            let target = try WebhookTarget.parse("https://[\(address)]/hook", allowHTTP: false)
            #expect(try await target.checkAddresses(allowPrivate: false).first?.addressClass == .public, "\(address)")
        }
    }

    @Test("the default retry schedule lasts about three days; WEBHOOK_RETRY_SCHEDULE is parsed and checked; jitter stays within ±20 %")
    func schedule() throws {
        let total = WebhooksConfiguration.defaultRetrySchedule.reduce(Duration.zero, +)
        #expect(total > .seconds(60 * 3600) && total < .seconds(84 * 3600), "\(total)")
        var environment = ["KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092", "POSTGRES_URL": "postgres://x@127.0.0.1/x", "WEBHOOK_RETRY_SCHEDULE": "1s,1s,1s"]
        let configuration = try WebhooksConfiguration.fromEnvironment(EnvironmentReader(environment))
        #expect(configuration.retrySchedule == [.seconds(1), .seconds(1), .seconds(1)])
        #expect(configuration.retryDelay(afterAttempt: 4) == nil, "three retries, then dead")
        for attempt in 1...3 {
            let delay = try #require(configuration.retryDelay(afterAttempt: attempt))
            #expect(delay >= .milliseconds(800) && delay <= .milliseconds(1200))
        }
        environment["WEBHOOK_RETRY_SCHEDULE"] = "1s,soon"
        #expect(throws: ConfigurationError.self) { try WebhooksConfiguration.fromEnvironment(EnvironmentReader(environment)) }
        environment["WEBHOOK_RETRY_SCHEDULE"] = nil
        environment["POSTGRES_URL"] = nil
        #expect(throws: ConfigurationError.self) { try WebhooksConfiguration.fromEnvironment(EnvironmentReader(environment)) }
    }
}
