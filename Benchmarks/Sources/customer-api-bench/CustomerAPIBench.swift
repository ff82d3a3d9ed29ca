import AppStoreNotifications
import BenchSupport
import Crypto
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
/// Then Apple's real-time Get Retention Message request (docs/offers.md), signed by the test PKI, one connection:
/// answered with a message and a switch-plan product, and with a promotional offer (signed and written to the
/// nonce ledger before the answer); Apple allows under a second, the issue asks p99 under 100 ms.
///
/// With `BENCH_READ_URL` (a streaming standby of the same server, `postgres://user@host:port`, as `scripts/services.sh
/// replica up` prints it without the database), a second `customer-api` reads from it (`POSTGRES_READ_URL`), and the
/// reads are measured against both, each with the primary's CPU (its server processes' user + system time over
/// the run, in cores) beside it.
///
/// Usage: customer-api-bench BOOTSTRAP POSTGRES_URL [PURCHASES=200] [READS=4000] [BACKGROUND_PER_SECOND=200]
@main
struct CustomerAPIBench {
    static func main() async throws {
        let (stack, arguments) = try await BenchStack.start(
            name: "customer-api", usage: "customer-api-bench BOOTSTRAP POSTGRES_URL [PURCHASES] [READS] [BACKGROUND_PER_SECOND]")
        let (purchases, reads, backgroundRate) = (arguments.int(3, default: 200), arguments.int(4, default: 4_000), arguments.int(5, default: 200))
        defer { stack.stop() }
        let (minter, logger) = (stack.minter, stack.logger)
        let apiPort = TestServices.freePort(), opsPort = TestServices.freePort()
        // The retention rules, and an In-App Purchase key minted for this run to sign the offers (Apple's API is
        // never called: its base URL is a closed local port).
        let offerProduct = NotificationMinter.SubscriptionEvent.sample(seed: 4, signedDate: 0, type: "SUBSCRIBED").productId
        let rulesFile = stack.work + "/retention-rules.json", keyFile = stack.work + "/offers.p8"
        try """
            {"\(minter.bundleId)": [
                {"status": ["billingRetry", "gracePeriod"], "message": "a1b2c3d4-0000-4000-8000-00000000000a"},
                {"status": ["active"], "productId": "\(offerProduct)", "message": "a1b2c3d4-0000-4000-8000-00000000000b", "promotionalOffer": "stay_50"},
                {"status": ["active"], "message": "a1b2c3d4-0000-4000-8000-00000000000c", "alternateProduct": "com.example.pipeline.pro.yearly"}
            ]}
            """.write(toFile: rulesFile, atomically: true, encoding: .utf8)
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyFile)
        // The worker migrates at start; the API's readiness waits for the schema.
        let api = try await stack.start("customer-api", [
            "CUSTOMER_API_HOST": "127.0.0.1", "CUSTOMER_API_PORT": String(apiPort), "CUSTOMER_API_OPS_PORT": String(opsPort),
            // The read benchmark is one key asking as fast as it can: the per-key limit (429 over 50/s) is off.
            "CUSTOMER_API_RATE_LIMIT": "0",
            "RETENTION_RULES_FILE": rulesFile, "APPSTORE_KEY_ID": "BENCHKEY01", "APPSTORE_ISSUER_ID": "57246542-96fe-1a63-e053-0824d011072a",
            "APPSTORE_PRIVATE_KEY_FILE": keyFile, "APPSTORE_API_BASE_URL": "http://127.0.0.1:9",
        ], opsPort: opsPort)
        let key = APIKeySecret.generate()
        let store = PostgresClient(configuration: try .init(url: stack.databaseURL), backgroundLogger: logger)
        let storeRunning = Task { await store.run() }
        try await CustomerStore(client: store, logger: logger).createAPIKey(id: key.id, name: "bench", secretSHA256: key.hash, scope: "write", bundleIds: [])
        storeRunning.cancel()
        let headers = ["Authorization": "Bearer " + key.text, "Content-Type": "application/json"]

        // The steady background: notifications of other subscriptions, produced at a fixed rate all along.
        let background = stack.background(perSecond: backgroundRate, firstSubscription: 1_000_000)
        defer { background.cancel() }

        // Purchases: one customer buys `purchases` subscriptions (the first 20 are the read benchmark's).
        let customer = UUID().uuidString.lowercased()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        // Ids of this run's own (a second run on a seeded book must not buy the first run's subscriptions again:
        // a purchase already applied is a duplicate, and its POST waits for an application that never comes).
        let firstSubscription = 3_000_000_000_000_000 + Int64.random(in: 0..<1_000_000) * 1_000
        let connection = HTTPTestConnection(port: apiPort)
        var purchaseLatencies: [Double] = []
        var statuses: [Int: Int] = [:]
        for index in 0..<purchases {
            var event = NotificationMinter.SubscriptionEvent.sample(seed: (index + 1) * 4, signedDate: now - 60_000, type: "SUBSCRIBED")
            event.originalTransactionId = String(firstSubscription + Int64(index))
            event.expiresDate = now + 30 * 86_400_000
            event.appAccountToken = index < 20 ? customer : UUID().uuidString.lowercased()
            let body = JSONObject([
                "customerId": .string(event.appAccountToken), "signedTransaction": .string(minter.chain.sign(minter.transaction(event))),
                "signedRenewalInfo": .string(minter.chain.sign(minter.renewalInfo(event))),
            ])
            let started = ContinuousClock.now
            let response = try await connection.send(method: "POST", path: "/v1/apps/\(minter.bundleId)/purchases", headers: headers, body: Array(body.serialized.utf8))
            purchaseLatencies.append(BenchFigures.milliseconds(ContinuousClock.now - started))
            statuses[response.status, default: 0] += 1
        }
        print("customer-api-bench: \(purchases) purchases with a worker and \(backgroundRate) notifications/s of other subscriptions beside them, on \(ProcessInfo.processInfo.activeProcessorCount) cores")
        print("purchase → answer: p50 \(BenchFigures.format(BenchFigures.percentile(purchaseLatencies, 0.5))) ms, p99 \(BenchFigures.format(BenchFigures.percentile(purchaseLatencies, 0.99))) ms (target p99 < 250 ms); statuses \(statuses.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: " "))")

        // Reads: the customer with 20 subscriptions, over 8 connections; the reference is /health/live.
        let path = "/v1/apps/\(minter.bundleId)/customers/\(customer)"
        let check = try await connection.send(method: "GET", path: path, headers: headers)
        let owned = (try? StrictJSONParser().parseObject(check.body))?["subscriptions"]?.arrayValue?.count ?? 0
        for (label, port, route, requestHeaders, connections) in [
            ("GET /health/live (reference), 8 conn.", opsPort, "/health/live", [String: String](), 8), ("GET customer (20 subs), 1 connection", apiPort, path, headers, 1),
            ("GET customer (20 subs), 8 connections", apiPort, path, headers, 8),
        ] {
            let (latencies, perSecond) = try await BenchFigures.gets(port: port, route: route, headers: requestHeaders, connections: connections, count: reads)
            print("\(label.padding(toLength: 40, withPad: " ", startingAt: 0)) p50 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.5))) ms, p99 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.99))) ms, \(Int(perSecond)) reads/s")
        }
        print("the customer read owns \(owned) subscriptions (target p99 < 5 ms); customer-api RSS \(BenchFigures.format(ChildProcess.residentMegabytes(pid: api.processIdentifier) ?? 0)) MB")

        // Apple's real-time retention request for one of the customer's subscriptions (the run's first,
        // of `offerProduct`), signed now by the test PKI: asked about another product (message and switch-plan
        // product), and about its own (the promotional offer: signed, written to the ledger, then answered).
        let retentionPath = "/v1/apps/\(minter.bundleId)/retention"
        for (label, product) in [("retention: message + switch plan", "com.example.other"), ("retention: promotional offer, ledger", offerProduct)] {
            var latencies: [Double] = []
            var answers: [String: Int] = [:]
            for _ in 0..<reads / 4 {
                let payload = JSONObject([
                    "originalTransactionId": .string(String(firstSubscription)), "appAppleId": .number(JSONNumber(minter.appAppleId)), "productId": .string(product),
                    "locale": .string("en-US"), "requestIdentifier": .string(UUID().uuidString.lowercased()), "environment": .string(minter.environment.rawValue),
                    "signedDate": .number(JSONNumber(Int64(Date().timeIntervalSince1970 * 1000))),
                ])
                let body = Array(JSONValue.object(JSONObject(["signedPayload": .string(minter.chain.sign(payload))])).serialized.utf8)
                let started = ContinuousClock.now
                let response = try await connection.send(method: "POST", path: retentionPath, headers: ["Content-Type": "application/json"], body: body)
                latencies.append(BenchFigures.milliseconds(ContinuousClock.now - started))
                let keys = (try? StrictJSONParser().parseObject(response.body))?.keys.sorted().joined(separator: "+") ?? "?"
                answers["\(response.status) \(keys.isEmpty ? "no message" : keys)", default: 0] += 1
            }
            print("\(label.padding(toLength: 40, withPad: " ", startingAt: 0)) p50 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.5))) ms, p99 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.99))) ms, max \(BenchFigures.format(latencies.max() ?? 0)) ms (target p99 < 100 ms); answers \(answers.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", "))")
        }

        guard let readURL = ProcessInfo.processInfo.environment["BENCH_READ_URL"], !readURL.isEmpty else { return }
        // The standby must have replayed the purchases (and the key) before its reads are measured.
        let database = stack.databaseURL[stack.databaseURL.index(after: stack.databaseURL.lastIndex(of: "/")!)...]
        let replicaPort = TestServices.freePort(), replicaOpsPort = TestServices.freePort()
        _ = try await stack.start("customer-api", [
            "CUSTOMER_API_HOST": "127.0.0.1", "CUSTOMER_API_PORT": String(replicaPort), "CUSTOMER_API_OPS_PORT": String(replicaOpsPort),
            "CUSTOMER_API_RATE_LIMIT": "0", "POSTGRES_READ_URL": readURL + "/" + database,
        ], opsPort: replicaOpsPort)
        try await Task.sleep(for: .seconds(2))
        let postmaster = try await PrimaryCPU.postmaster(url: stack.databaseURL, logger: logger)
        print("reads against the primary and against the standby (\(readURL)); primary CPU: its server processes' user + system time over the run")
        for (label, port) in [("primary", apiPort), ("standby", replicaPort)] {
            for connections in [1, 8] {
                let before = PrimaryCPU.seconds(postmaster: postmaster)
                let started = ContinuousClock.now
                let (latencies, perSecond) = try await BenchFigures.gets(port: port, route: path, headers: headers, connections: connections, count: reads)
                let wall = BenchFigures.milliseconds(ContinuousClock.now - started) / 1_000
                let cores = (PrimaryCPU.seconds(postmaster: postmaster) - before) / wall
                print("GET customer from the \(label), \(connections) conn.".padding(toLength: 40, withPad: " ", startingAt: 0)
                    + " p50 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.5))) ms, p99 \(BenchFigures.format(BenchFigures.percentile(latencies, 0.99))) ms, \(Int(perSecond)) reads/s, primary CPU \(BenchFigures.format(cores)) cores")
            }
        }
        let metrics = try await HTTPTestConnection(port: replicaOpsPort).send(method: "GET", path: "/metrics").bodyText
        print(metrics.split(separator: "\n").filter { $0.hasPrefix("postgres_reads_total") }.joined(separator: "\n"))
    }
}

/// The primary's CPU: the user + system seconds of its postmaster's children (the backends, the WAL sender, the
/// background workers), from /proc.
enum PrimaryCPU {
    static func postmaster(url: String, logger: Logger) async throws -> Int32 {
        let client = PostgresClient(configuration: try .init(url: url), backgroundLogger: logger)
        let running = Task { await client.run() }
        defer { running.cancel() }
        for try await pid in try await client.query("SELECT pg_backend_pid()").decode(Int32.self) {
            return parent(of: pid) ?? 0
        }
        return 0
    }

    static func fields(_ pid: Int32) -> [Substring]? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ")
    }

    static func parent(of pid: Int32) -> Int32? { fields(pid).flatMap { Int32($0[1]) } }

    static func seconds(postmaster: Int32) -> Double {
        let pids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap(Int32.init)
        var ticks = 0.0
        for pid in pids {
            guard let fields = fields(pid), pid == postmaster || Int32(fields[1]) == postmaster else { continue }
            ticks += (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        }
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
