import AppStoreNotifications
import CustomerAPI
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import PostgresNIO
import TestSupport

/// The customer API's latencies with everything it needs running on this machine: the release `worker` and
/// `customer-api` binaries (`ChildProcess.pipelineBinary`), the broker and PostgreSQL of the arguments, and a steady load of
/// notifications produced beside it the whole time (what the workers also have to apply).
///
/// Prints purchase → 200 latency (p50, p99: the POST until the answer that a worker applied it), then the read of
/// one customer who owns 20 subscriptions (p50, p99, reads/s over 8 keep-alive connections). The reference in the
/// same run is a bare `GET /health/live` on the ops port (the HTTP round trip alone).
///
/// Usage: customer-api-bench BOOTSTRAP POSTGRES_URL [PURCHASES=200] [READS=4000] [BACKGROUND_PER_SECOND=200]
@main
struct CustomerAPIBench {
    static func main() async throws {
        let arguments = BenchArguments(usage: "customer-api-bench BOOTSTRAP POSTGRES_URL [PURCHASES] [READS] [BACKGROUND_PER_SECOND]", required: 2)
        let bootstrap = arguments[1], postgresURL = arguments[2]
        let purchases = arguments.int(3, default: 200)
        let reads = arguments.int(4, default: 4_000)
        let backgroundRate = arguments.int(5, default: 200)
        var logger = Logger(label: "customer-api-bench")
        logger.logLevel = .critical
        let work = NSTemporaryDirectory() + "customer-api-bench-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work) }

        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain())
        try Data((try authority.rootCertificate.serializeAsPEM().pemString + "\n").utf8).write(to: URL(fileURLWithPath: work + "/root.pem"))
        let topic = "bench-customer-api-\(UUID().uuidString.prefix(8))"
        let client = KafkaClientConfiguration(bootstrapServers: [bootstrap])
        let admin = try KafkaAdminClient(configuration: client, logger: logger)
        _ = try await admin.createTopics([
            .init(name: topic, partitions: 4), .init(name: topic + ".dead-letter", partitions: 1), .init(name: topic + ".events", partitions: 4),
        ])
        await admin.close()
        let database = "bench_\(UUID().uuidString.prefix(8).lowercased())"
        let postgres = PostgresClient(configuration: try .init(url: postgresURL), backgroundLogger: logger)
        let postgresRunning = Task { await postgres.run() }
        _ = try await postgres.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: logger)
        postgresRunning.cancel()
        let databaseURL = String(postgresURL[..<postgresURL.lastIndex(of: "/")!]) + "/" + database

        let shared = [
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "NOTIFICATIONS_TOPIC": topic, "POSTGRES_URL": databaseURL, "APPS": "\(minter.bundleId):\(minter.appAppleId)",
            "TRUSTED_ROOTS": work + "/root.pem", "LOG_LEVEL": "error", "EVENTS_TOPIC": topic + ".events",
        ]
        let worker = try await ChildProcess.start(binary: ChildProcess.pipelineBinary("worker"), environment: shared.merging([
            "WORKER_GROUP_ID": "bench-\(topic)", "WORKER_OPS_HOST": "127.0.0.1", "WORKER_OPS_PORT": String(TestServices.freePort()),
            "KAFKA_CONFIG_SESSION_TIMEOUT_MS": "6000", "KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS": "500",
        ]) { _, new in new }, logFile: work + "/worker.log", listeningOn: nil)
        let apiPort = TestServices.freePort(), opsPort = TestServices.freePort()
        // The worker migrates at start; the API's readiness waits for the schema.
        let api = try await ChildProcess.start(binary: ChildProcess.pipelineBinary("customer-api"), environment: shared.merging([
            "CUSTOMER_API_HOST": "127.0.0.1", "CUSTOMER_API_PORT": String(apiPort), "CUSTOMER_API_OPS_PORT": String(opsPort),
        ]) { _, new in new }, logFile: work + "/customer-api.log", listeningOn: opsPort)
        defer {
            kill(api.processIdentifier, SIGKILL)
            kill(worker.processIdentifier, SIGKILL)
        }
        let ops = HTTPTestConnection(port: opsPort)
        for _ in 0..<300 {
            if (try? await ops.send(method: "GET", path: "/health/ready"))?.status == 200 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let key = APIKeySecret.generate()
        let store = PostgresClient(configuration: try .init(url: databaseURL), backgroundLogger: logger)
        let storeRunning = Task { await store.run() }
        try await CustomerStore(client: store, logger: logger).createAPIKey(id: key.id, name: "bench", secretSHA256: key.hash, scope: "write", bundleIds: [])
        storeRunning.cancel()
        let headers = ["Authorization": "Bearer " + key.text, "Content-Type": "application/json"]

        // The steady background: notifications of other subscriptions, produced at a fixed rate all along.
        let background = Task {
            let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(client: client), logger: logger)
            var seed = 1_000_000
            let start = Int64(Date().timeIntervalSince1970 * 1000) - 40 * 86_400_000
            while !Task.isCancelled {
                let tick = ContinuousClock.now
                for event in NotificationMinter.lifecycleEvents(subscriptions: max(1, backgroundRate / 10), firstSubscription: seed, start: start) {
                    let payload = minter.signedNotification(event)
                    try? producer.send(KafkaProducerMessage(
                        topic: topic, key: UnverifiedPeek.partitionKey(ofNotification: payload).map { Array($0.utf8) }, value: Array(payload.utf8)))
                }
                seed += max(1, backgroundRate / 10)
                try? await Task.sleep(until: tick + .milliseconds(300), clock: .continuous)
            }
            await producer.close()
        }
        defer { background.cancel() }

        // Purchases: one customer buys `purchases` subscriptions (the first 20 are the read benchmark's).
        let customer = UUID().uuidString.lowercased()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let connection = HTTPTestConnection(port: apiPort)
        var purchaseLatencies: [Double] = []
        var statuses: [Int: Int] = [:]
        for index in 0..<purchases {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: (index + 1) * 4, signedDate: now - 60_000, type: "SUBSCRIBED")
            event.originalTransactionId = String(3_000_000_000_000_000 + index)
            event.expiresDate = now + 30 * 86_400_000
            event.appAccountToken = index < 20 ? customer : UUID().uuidString.lowercased()
            let body = JSONObject([
                "customerId": .string(event.appAccountToken), "signedTransaction": .string(minter.chain.sign(minter.transaction(event))),
                "signedRenewalInfo": .string(minter.chain.sign(minter.renewalInfo(event))),
            ])
            let started = ContinuousClock.now
            let response = try await connection.send(method: "POST", path: "/v1/apps/\(minter.bundleId)/purchases", headers: headers, body: Array(body.serialized.utf8))
            purchaseLatencies.append(milliseconds(ContinuousClock.now - started))
            statuses[response.status, default: 0] += 1
        }
        print("customer-api-bench: \(purchases) purchases with a worker and \(backgroundRate) notifications/s of other subscriptions beside them, on \(ProcessInfo.processInfo.activeProcessorCount) cores")
        print("purchase → answer: p50 \(format(percentile(purchaseLatencies, 0.5))) ms, p99 \(format(percentile(purchaseLatencies, 0.99))) ms (target p99 < 250 ms); statuses \(statuses.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " "))")

        // Reads: the customer with 20 subscriptions, over 8 connections; the reference is /health/live.
        let path = "/v1/apps/\(minter.bundleId)/customers/\(customer)"
        let check = try await connection.send(method: "GET", path: path, headers: headers)
        let owned = (try? StrictJSONParser().parseObject(check.body))?["subscriptions"]?.arrayValue?.count ?? 0
        for (label, port, route, requestHeaders, connections) in [
            ("GET /health/live (reference), 8 conn.", opsPort, "/health/live", [String: String](), 8), ("GET customer (20 subs), 1 connection", apiPort, path, headers, 1),
            ("GET customer (20 subs), 8 connections", apiPort, path, headers, 8),
        ] {
            let started = ContinuousClock.now
            let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
                for _ in 0..<connections {
                    group.addTask {
                        let reader = HTTPTestConnection(port: port)
                        var samples: [Double] = []
                        for _ in 0..<(reads / connections) {
                            let begin = ContinuousClock.now
                            let response = try await reader.send(method: "GET", path: route, headers: requestHeaders)
                            guard response.status == 200 else { throw HTTPTestConnection.Failure(description: "\(route) answered \(response.status)") }
                            samples.append(milliseconds(ContinuousClock.now - begin))
                        }
                        return samples
                    }
                }
                var all: [Double] = []
                for try await samples in group { all += samples }
                return all
            }
            let elapsed = milliseconds(ContinuousClock.now - started) / 1000
            print("\(label.padding(toLength: 40, withPad: " ", startingAt: 0)) p50 \(format(percentile(latencies, 0.5))) ms, p99 \(format(percentile(latencies, 0.99))) ms, \(Int(Double(latencies.count) / elapsed)) reads/s")
        }
        print("the customer read owns \(owned) subscriptions (target p99 < 5 ms); customer-api RSS \(format(ChildProcess.residentMegabytes(pid: api.processIdentifier) ?? 0)) MB")
    }

    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
    }

    static func format(_ value: Double) -> String { String(format: "%.1f", value) }
}
