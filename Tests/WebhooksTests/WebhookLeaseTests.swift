import EntitlementStore
import Foundation
import PostgresNIO
import TestSupport
import Testing
import Webhooks
import PipelineTestSupport
import TestGates

/// The delivery table's claim and record, against a real PostgreSQL: fencing by lease token, the claim's
/// re-check of `next_attempt_at`, disabled endpoints holding their deliveries.
@Suite("Webhook leases: fenced attempts, due-only claims, disabled endpoints hold", .serialized, .requiresPostgres)
struct WebhookLeaseTests {
    func withStore(_ body: @Sendable (WebhookStore, PostgresClient) async throws -> Void) async throws {
        let base = try RequiredServices.postgresURL
        let url = try await TestDatabase.create(TestServices.uniqueName("leases").replacingOccurrences(of: "-", with: "_"), on: base)
        try await TestDatabase.with(url) { client in
            _ = try await EntitlementStore(client: client, logger: ingestTestLogger).migrate()
            try await body(WebhookStore(client: client, logger: ingestTestLogger), client)
        }
    }

    static func event(_ number: Int64, subject: String = "2000000000000001") -> WebhookEvent {
        WebhookEvent(
            id: "event-\(number)", type: "entitlement.renewed", subject: subject, time: Date(), bundleId: "com.example.app", environment: "Production",
            partition: 0, offset: number, body: "{}")
    }

    static let attempt = WebhookAttempt(status: 200, error: nil, latencyMilliseconds: 5, responseExcerpt: "ok")

    @Test("an attempt that lost its lease records nothing: the row stays delivered, the attempt is not counted twice")
    func fencedRecord() async throws {
        try await withStore { store, client in
            let endpoint = WebhookEndpoint(id: "we_fence", url: "https://example.com/", description: nil, bundleIds: [], environment: nil, eventTypes: [], allowHTTP: false, secret: "whsec_x")
            try await store.addEndpoint(endpoint)
            #expect(try await store.enqueue([Self.event(1)], endpoints: [endpoint]) == 1)
            let first = try #require(try await store.claimDue(limit: 10, lease: .seconds(60), perEndpoint: 8).first)
            #expect(try await store.claimDue(limit: 10, lease: .seconds(60), perEndpoint: 8).isEmpty, "a leased row was claimed twice")
            // The first attempt hangs past its lease; another process claims the row and delivers it.
            try await client.query("UPDATE webhook_deliveries SET leased_until = now() - interval '1 second'", logger: ingestTestLogger)
            let second = try #require(try await store.claimDue(limit: 10, lease: .seconds(60), perEndpoint: 8).first)
            #expect(second.id == first.id && second.leaseToken != first.leaseToken)
            #expect(try await store.record(Self.attempt, of: second, outcome: .delivered))
            // The first attempt's late failure changes nothing.
            var late = Self.attempt
            late.status = 500
            #expect(try await store.record(late, of: first, outcome: .retry(at: Date())) == false)
            let rows = try await client.query("SELECT status, attempts FROM webhook_deliveries", logger: ingestTestLogger)
            for try await (status, attempts) in rows.decode((String, Int).self) { #expect(status == "delivered" && attempts == 1, "\(status) \(attempts)") }
            let logged = try await client.query("SELECT count(*)::int FROM webhook_attempts", logger: ingestTestLogger)
            for try await count in logged.decode(Int.self) { #expect(count == 1) }
        }
    }

    @Test("a delivery scheduled for later is not claimed, even by a claim that read it as due; a disabled endpoint's deliveries are enqueued and wait")
    func dueAndDisabled() async throws {
        try await withStore { store, client in
            var endpoint = WebhookEndpoint(id: "we_due", url: "https://example.com/", description: nil, bundleIds: [], environment: nil, eventTypes: [], allowHTTP: false, secret: "whsec_x")
            try await store.addEndpoint(endpoint)
            try await store.enqueue([Self.event(1)], endpoints: [endpoint])
            let claimed = try #require(try await store.claimDue(limit: 10, lease: .seconds(60), perEndpoint: 8).first)
            #expect(try await store.record(WebhookAttempt(status: 500, error: nil, latencyMilliseconds: 1, responseExcerpt: nil), of: claimed, outcome: .retry(at: Date().addingTimeInterval(3_600))))
            #expect(try await store.claimDue(limit: 10, lease: .seconds(60), perEndpoint: 8).isEmpty, "a delivery scheduled in an hour was claimed")

            #expect(try await store.setEnabled(id: endpoint.id, enabled: false, reason: "maintenance"))
            endpoint.enabled = false
            #expect(try await store.enqueue([Self.event(2, subject: "2000000000000002"), Self.event(3, subject: "2000000000000003")], endpoints: [endpoint]) == 2)
            #expect(try await store.claimDue(limit: 10, lease: .seconds(60), perEndpoint: 8).isEmpty, "a disabled endpoint's delivery was claimed")
            let backlog = try #require(try await store.backlogs()[endpoint.id])
            #expect(backlog.waiting == 3 && !backlog.enabled)
            #expect(try await store.setEnabled(id: endpoint.id, enabled: true, reason: nil))
            #expect(Set(try await store.claimDue(limit: 10, lease: .seconds(60), perEndpoint: 8).map(\.eventId)) == ["event-2", "event-3"])
            _ = client
        }
    }

    @Test("410 disables the endpoint with its reason; Retry-After replaces the step's delay, bounded by the longest step; the schedule still ends")
    func answers() throws {
        var configuration = WebhooksConfiguration(kafka: .init(bootstrapServers: [], clientId: "test"))
        configuration.retrySchedule = [.seconds(1), .seconds(60)]
        let now = Date()
        func attempt(_ status: Int, retryAfter: Duration? = nil) -> WebhookAttempt {
            WebhookAttempt(status: status, error: nil, latencyMilliseconds: 1, responseExcerpt: nil, retryAfter: retryAfter)
        }
        guard case .gone(let reason) = configuration.outcome(of: attempt(410), attempts: 0, now: now) else { Issue.record("410 is not gone"); return }
        #expect(reason.contains("410"))
        #expect(configuration.outcome(of: attempt(429, retryAfter: .seconds(30)), attempts: 0, now: now) == .retry(at: now.addingTimeInterval(30)))
        #expect(configuration.outcome(of: attempt(503, retryAfter: .seconds(86_400)), attempts: 0, now: now) == .retry(at: now.addingTimeInterval(60)), "bounded by the longest step")
        #expect(configuration.outcome(of: attempt(429, retryAfter: .seconds(5)), attempts: 2, now: now) == .dead(disableAfter: configuration.disableAfterFailures))
        #expect(configuration.outcome(of: attempt(204), attempts: 5, now: now) == .delivered)
        #expect(WebhookSender.retryAfter("120") == .seconds(120))
        #expect(WebhookSender.retryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now: Date(timeIntervalSince1970: 1_445_412_420)) == .seconds(60))
        #expect(WebhookSender.retryAfter("soon") == nil)
    }
}
