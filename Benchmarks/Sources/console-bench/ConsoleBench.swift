import AppStoreNotifications
import BenchSupport
import Console
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import PostgresNIO
import TestSupport

/// The console's first page of a heavy customer, with the pipeline running beside it: the release `worker` applying
/// a steady stream of other subscriptions' notifications (produced the whole time), and the release `console`.
///
/// The customer owns 20 subscriptions whose timelines hold 2 000 rows (per subscription: 70 notifications, a seventh
/// of them unchanged and a fifth delivered twice, 25 entitlement events with a webhook delivery each, 5 dead letters),
/// written straight into PostgreSQL (minting and verifying 1 400 notifications would time the worker, not the page),
/// among 200 other customers' rows. Prints p50/p99 of the customer page and a subscription page (first pages, and the
/// customer's last page through the cursor), over 1 and 4 keep-alive connections, next to a bare `GET /health/live` on
/// the console's ops port in the same run (the HTTP round trip alone).
///
/// Usage: console-bench BOOTSTRAP POSTGRES_URL [REQUESTS=400] [BACKGROUND_PER_SECOND=200]
@main
struct ConsoleBench {
    static func main() async throws {
        let (stack, arguments) = try await BenchStack.start(name: "console", usage: "console-bench BOOTSTRAP POSTGRES_URL [REQUESTS] [BACKGROUND_PER_SECOND]")
        let (requests, backgroundRate) = (arguments.int(3, default: 400), arguments.int(4, default: 200))
        defer { stack.stop() }
        let (minter, logger) = (stack.minter, stack.logger)
        let port = TestServices.freePort(), opsPort = TestServices.freePort()
        let console = try await stack.start("console", [
            "CONSOLE_HOST": "127.0.0.1", "CONSOLE_PORT": String(port), "CONSOLE_OPS_PORT": String(opsPort), "CONSOLE_ALLOW_HTTP": "true",
        ], opsPort: opsPort)

        // The book: the customer's 20 subscriptions and 200 other customers' (one subscription each, 100 rows).
        let store = PostgresClient(configuration: try .init(url: stack.databaseURL), backgroundLogger: logger)
        let storeRunning = Task { await store.run() }
        let customer = UUID().uuidString.lowercased()
        let bundle = minter.bundleId
        try await seed(store, bundle: bundle, customer: customer, subscriptions: 1...20, logger: logger)
        for other in 0..<200 { try await seed(store, bundle: bundle, customer: UUID().uuidString.lowercased(), subscriptions: (1_000 + other)...(1_000 + other), logger: logger) }
        _ = try await store.query("ANALYZE", logger: logger)
        let consoleStore = EntitlementStore(client: store, logger: logger).console
        _ = try await consoleStore.addOperator(email: "bench@example.com", role: .viewer, passwordHash: "unused")
        let account = try await consoleStore.operatorAccount(email: "bench@example.com")
        let (token, _) = try await consoleStore.openSession(operatorId: account!.id)
        storeRunning.cancel()
        let headers = ["Cookie": "console_session=" + token]

        // The pipeline running: notifications of other subscriptions, produced at a fixed rate all along.
        let background = stack.background(perSecond: backgroundRate, firstSubscription: 2_000_000)
        defer { background.cancel() }
        try await Task.sleep(for: .seconds(2))

        let customerPath = ConsolePaths.customer(bundle: bundle, customerId: customer)
        let check = try await HTTPTestConnection(port: port).send(method: "GET", path: customerPath, headers: headers)
        let page = String(decoding: check.body, as: UTF8.self)
        let rowsShown = page.components(separatedBy: "class=\"row ").count - 1
        guard check.status == 200, rowsShown == 50, let older = page.range(of: "href=\"" + customerPath + "?before=") else {
            print("console-bench: the customer page did not answer as expected (status \(check.status), \(rowsShown) rows)")
            exit(1)
        }
        let cursor = String(page[older.upperBound...].prefix { $0 != "\"" })
        let lastPage = customerPath + "?before=" + cursor
        print("console-bench: a customer with 20 subscriptions and 2 000 timeline rows among 22 000; worker applying \(backgroundRate) notifications/s beside; \(ProcessInfo.processInfo.activeProcessorCount) cores")
        for (label, targetPort, route, requestHeaders, connections) in [
            ("GET /health/live (reference), 1 conn.", opsPort, "/health/live", [String: String](), 1),
            ("customer page 1, 1 connection", port, customerPath, headers, 1),
            ("customer page 1, 4 connections", port, customerPath, headers, 4),
            ("customer page 2 (cursor), 1 conn.", port, lastPage, headers, 1),
            ("subscription page 1, 1 connection", port, ConsolePaths.subscription(bundle: bundle, id: subscriptionId(1)), headers, 1),
        ] {
            let (latencies, perSecond) = try await BenchFigures.gets(port: targetPort, route: route, headers: requestHeaders, connections: connections, count: requests)
            print("\(label.padding(toLength: 40, withPad: " ", startingAt: 0)) p50 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.5))) ms, p99 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.99))) ms, \(Int(perSecond)) pages/s")
        }
        print("target: the customer's first page p99 < 100 ms; console RSS \(BenchFigures.format(ChildProcess.residentMegabytes(pid: console.processIdentifier) ?? 0)) MB")
    }

    static func subscriptionId(_ index: Int) -> String { String(4_000_000_000_000_000 + index) }

    /// 100 timeline rows for each subscription in `subscriptions`, owned by `customer`.
    static func seed(_ client: PostgresClient, bundle: String, customer: String, subscriptions: ClosedRange<Int>, logger: Logger) async throws {
        let ids = subscriptions.map(subscriptionId)
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query(
                """
                INSERT INTO customer_ownership (environment, bundle_id, original_transaction_id, customer_id, via)
                SELECT 'Production', \(bundle), s, \(customer), 'bound' FROM unnest(\(ids)::text[]) s
                """, logger: logger)
            try await connection.query(
                """
                SELECT ensure_time_partition(t, 'month', now() - interval '2 hours')
                FROM unnest(ARRAY['notification_ledger', 'notification_archive', 'notification_deliveries']::regclass[]) t
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO notification_ledger (notification_uuid, routing_key, signed_date, first_seen_at, outcome)
                SELECT s || '-' || i, s, now() - make_interval(mins => i), now() - make_interval(mins => i),
                    CASE WHEN i % 7 = 0 THEN 'unchanged' ELSE 'applied' END
                FROM unnest(\(ids)::text[]) s, generate_series(1, 70) i
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO notification_archive (notification_uuid, routing_key, notification_type, signed_date, environment, bundle_id, original_transaction_id,
                    signed_payload, payload, source)
                SELECT s || '-' || i, s, 'DID_RENEW', now() - make_interval(mins => i), 'Production', \(bundle), s, 'x.y.z', '{}'::jsonb, 'ingest'
                FROM unnest(\(ids)::text[]) s, generate_series(1, 70) i
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO notification_deliveries (kafka_topic, kafka_partition, kafka_offset, notification_uuid, routing_key, signed_date, source, received_at)
                SELECT 'bench-' || s, 0, i * 2 + d, s || '-' || i, s, now() - make_interval(mins => i), 'ingest', now() - make_interval(mins => i)
                FROM unnest(\(ids)::text[]) s, generate_series(1, 70) i, generate_series(0, 1) d WHERE d = 0 OR i % 5 = 0
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO entitlement_events_outbox (event_id, event_type, source, subject, event_time, sequence, environment, bundle_id, original_transaction_id,
                    data, created_at, published_at)
                SELECT s || '-e' || i, 'entitlement.renewed', '/bench', s, now() - make_interval(mins => i), i, 'Production', \(bundle), s,
                    '{"before":{"status":"active"},"after":{"status":"active"}}', now() - make_interval(mins => i), now()
                FROM unnest(\(ids)::text[]) s, generate_series(1, 25) i
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO webhook_endpoints (id, url, secret) VALUES ('we_bench', 'https://example.com/hook', 'whsec_bench') ON CONFLICT DO NOTHING
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status, attempts)
                SELECT 'we_bench', s || '-e' || i, 'entitlement.renewed', s, now(), 0, i, '{}', 'delivered', 1
                FROM unnest(\(ids)::text[]) s, generate_series(1, 25) i
                """, logger: logger)
            try await connection.query(
                """
                INSERT INTO dead_lettered_records (original_topic, original_partition, original_offset, error_code, reason, notification_uuid, bundle_id,
                    original_transaction_id, payload, received_at)
                SELECT 'bench-' || s, 1, i, 'invalidChain', 'the chain does not lead to a configured root', s || '-d' || i, \(bundle), s, 'x.y.z',
                    now() - make_interval(mins => i)
                FROM unnest(\(ids)::text[]) s, generate_series(1, 5) i
                """, logger: logger)
        }
    }
}
