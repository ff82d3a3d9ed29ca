import AppStoreNotifications
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import PipelineTestSupport
import TestGates
#endif

/// Where the customer API's reads went, from its `/metrics` (`postgres_reads_total` by target and reason).
struct ReadTargets: Equatable {
    var counts: [String: Int] = [:]

    static func read(opsPort: Int) async throws -> ReadTargets {
        let text = try await HTTPTestConnection(port: opsPort).send(method: "GET", path: "/metrics").bodyText
        var targets = ReadTargets()
        for line in text.split(separator: "\n") where line.hasPrefix("postgres_reads_total{") {
            let labels = line[line.index(after: line.firstIndex(of: "{")!)..<line.firstIndex(of: "}")!]
            let target = labels.split(separator: ",").first { $0.hasPrefix("target=") }.map { String($0.dropFirst(8).dropLast()) } ?? "?"
            let reason = labels.split(separator: ",").first { $0.hasPrefix("reason=") }.map { String($0.dropFirst(8).dropLast()) } ?? "?"
            targets.counts[target + "/" + reason, default: 0] += Int(Double(line.split(separator: " ").last ?? "0") ?? 0)
        }
        return targets
    }

    func minus(_ earlier: ReadTargets) -> ReadTargets {
        ReadTargets(counts: counts.merging(earlier.counts.mapValues { -$0 }) { $0 + $1 }.filter { $0.value != 0 })
    }

    func target(_ name: String) -> Int { counts.filter { $0.key.hasPrefix(name + "/") }.values.reduce(0, +) }
    func reason(_ name: String) -> Int { counts.filter { $0.key.hasSuffix("/" + name) }.values.reduce(0, +) }
    var total: Int { counts.values.reduce(0, +) }
}

@Suite("Reads from a streaming standby (500 ms behind) with read-your-writes: tokens, the sticky window, a standby that dies", .serialized, .requiresKafkaAndPostgres)
struct ReplicaReadTests: ProcessSuite {
    /// Posts `count` purchases of new customers (each its own subscription), `concurrency` at a time, and reads each
    /// customer back at once (`withToken`: sending the answer's `Consistency-Token`); returns how many reads did not
    /// show the purchase just answered (stale), and how many purchases were not answered 200 with a token.
    func purchaseThenRead(
        _ scene: CustomerAPIScene, key: String, seeds: Range<Int>, concurrency: Int, withToken: Bool
    ) async throws -> (stale: Int, failures: [String]) {
        // Signed up front (the scene's signing cache is not for concurrent use).
        var posts: [(customer: String, originalTransactionId: String, body: JSONObject)] = []
        for seed in seeds {
            let customer = UUID().uuidString.lowercased()
            let event = currentPeriod(seed: seed, token: customer)
            // The transaction alone (the renewal info is optional): what is read back is the subscription it opens.
            let body = JSONObject(["customerId": .string(customer), "signedTransaction": .string(scene.minter.chain.sign(scene.minter.transaction(event)))])
            posts.append((customer, event.originalTransactionId, body))
        }
        let (port, bundleId) = (scene.port, scene.bundleId)
        return try await withThrowingTaskGroup(of: (Bool, String?).self) { group in
            var next = 0
            func add() {
                let post = posts[next]
                next += 1
                group.addTask {
                    let connection = HTTPTestConnection(port: port)
                    let bearer = ["Authorization": "Bearer " + key]
                    let answer = try await connection.send(
                        method: "POST", path: "/v1/apps/\(bundleId)/purchases", headers: bearer.merging(["Content-Type": "application/json"]) { $1 },
                        body: Array(post.body.serialized.utf8))
                    let json = (try? StrictJSONParser().parseObject(answer.body)) ?? JSONObject([:])
                    guard answer.status == 200, let token = answer.headers["consistency-token"], json["consistencyToken"] == .string(token) else {
                        return (false, "POST \(answer.status) token \(answer.headers["consistency-token"] ?? "none"): \(answer.bodyText.prefix(300))")
                    }
                    let read = try await connection.send(
                        method: "GET", path: "/v1/apps/\(bundleId)/customers/\(post.customer)",
                        headers: withToken ? bearer.merging(["Consistency-Token": token]) { $1 } : bearer)
                    guard read.status == 200 else { return (false, "GET \(read.status): \(read.bodyText.prefix(300))") }
                    let subscriptions = (try? StrictJSONParser().parseObject(read.body))?["subscriptions"]?.arrayValue ?? []
                    let fresh = subscriptions.contains { $0.objectValue?["originalTransactionId"] == .string(post.originalTransactionId) }
                    return (!fresh, nil)
                }
            }
            for _ in 0..<min(concurrency, posts.count) { add() }
            var stale = 0
            var failures: [String] = []
            while let (wasStale, failure) = try await group.next() {
                if wasStale { stale += 1 }
                if let failure { failures.append(failure) }
                if next < posts.count { add() }
            }
            return (stale, failures)
        }
    }

    @Test("2 000 purchases read back at once with their token: 0 stale (the primary answers what the standby has not replayed); without the token and without the sticky window most are stale; with the sticky window none; old rows: at least 95 % of reads from the standby; a token the standby reaches within POSTGRES_READ_WAIT is waited for; a standby past POSTGRES_READ_MAX_LAG is skipped")
    func readYourWrites() async throws {
        guard let standby = try await Standby.startIfPossible(applyDelay: "500ms") else { return }
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        // The sticky window off first: only a sent token protects a read.
        try await scene.startAPI(extra: ["POSTGRES_READ_URL": standby.url(of: scene.scene.database), "POSTGRES_READ_STICKY": "0s", "CUSTOMER_API_RATE_LIMIT": "0"])
        let key = try await scene.key().secret
        // The standby has the scene's database (and the key) once it replayed them.
        try await Task.sleep(for: .seconds(2))

        let before = try await ReadTargets.read(opsPort: scene.opsPort)
        let tokened = try await purchaseThenRead(scene, key: key, seeds: 1_000..<3_000, concurrency: 16, withToken: true)
        #expect(tokened.failures.isEmpty, "\(tokened.failures.prefix(5)) \(scene.fixture.logTail())")
        #expect(tokened.stale == 0, "reads with the token saw an older state \(tokened.stale) times")
        let tokenReads = try await ReadTargets.read(opsPort: scene.opsPort).minus(before)
        // The standby is 500 ms behind, more than POSTGRES_READ_WAIT (200 ms): mostly the primary answers at once. Every
        // read was routed by its token (none as a plain replica read); a replica read that failed (under a loaded CI,
        // a read past its 500 ms or a recovery conflict) was answered by the primary, as designed, and counts as such;
        // so does a read while the probe had the standby down or lagging (a probe past its 500 ms on a loaded machine).
        #expect(tokenReads.total >= 2_000 && tokenReads.reason("replica") == 0, "\(tokenReads)")
        let routed = ["token-behind", "token-replayed", "token-waited", "replica-failed", "replica-down", "replica-lagging"].map(tokenReads.reason).reduce(0, +)
        #expect(routed >= 2_000, "\(tokenReads)")

        // The control: the same without the token (and no sticky window): the standby answers, 500 ms behind.
        let untokened = try await purchaseThenRead(scene, key: key, seeds: 3_000..<3_100, concurrency: 4, withToken: false)
        #expect(untokened.failures.isEmpty, "\(untokened.failures.prefix(5))")
        #expect(untokened.stale >= 50, "the standby replays 500 ms late, so most untokened reads right after a purchase are stale: \(untokened.stale) of 100")

        // Old rows, no token: the standby serves them.
        try await Task.sleep(for: .seconds(1))
        let customers = try await scene.query("SELECT customer_id FROM customer_purchases ORDER BY customer_id LIMIT 400", as: String.self)
        let quiet = try await ReadTargets.read(opsPort: scene.opsPort)
        for customer in customers {
            let read = try await scene.request("GET", "/v1/apps/\(scene.bundleId)/customers/\(customer)", key: key)
            #expect(read.status == 200 && read.json["subscriptions"]?.arrayValue?.count == 1, "\(read.json.serialized)")
        }
        let quietReads = try await ReadTargets.read(opsPort: scene.opsPort).minus(quiet)
        #expect(Double(quietReads.target("replica")) >= 0.95 * Double(quietReads.total) && quietReads.total >= customers.count, "\(quietReads)")

        // The sticky window on, no token sent: the purchaser's own reads through this process are never stale.
        try await scene.startAPI(extra: ["POSTGRES_READ_URL": standby.url(of: scene.scene.database), "POSTGRES_READ_STICKY": "5s", "CUSTOMER_API_RATE_LIMIT": "0"])
        let sticky = try await purchaseThenRead(scene, key: key, seeds: 3_100..<3_400, concurrency: 8, withToken: false)
        #expect(sticky.failures.isEmpty, "\(sticky.failures.prefix(5))")
        #expect(sticky.stale == 0, "reads in the sticky window saw an older state \(sticky.stale) times")

        // A wait long enough for the standby's delay: token reads wait for it and it serves them.
        try await scene.startAPI(extra: ["POSTGRES_READ_URL": standby.url(of: scene.scene.database), "POSTGRES_READ_STICKY": "0s", "POSTGRES_READ_WAIT": "3s", "CUSTOMER_API_RATE_LIMIT": "0"])
        try await Task.sleep(for: .seconds(1))
        let waiting = try await ReadTargets.read(opsPort: scene.opsPort)
        let waited = try await purchaseThenRead(scene, key: key, seeds: 3_400..<3_440, concurrency: 4, withToken: true)
        #expect(waited.failures.isEmpty && waited.stale == 0, "\(waited)")
        let waitedReads = try await ReadTargets.read(opsPort: scene.opsPort).minus(waiting)
        #expect(waitedReads.counts["replica/token-waited", default: 0] + waitedReads.counts["replica/token-replayed", default: 0] >= 30, "\(waitedReads)")

        // POSTGRES_READ_MAX_LAG under the standby's delay: while purchases keep it behind, it is skipped.
        try await scene.startAPI(extra: ["POSTGRES_READ_URL": standby.url(of: scene.scene.database), "POSTGRES_READ_STICKY": "0s", "POSTGRES_READ_MAX_LAG": "200ms", "CUSTOMER_API_RATE_LIMIT": "0"])
        let lagging = try await ReadTargets.read(opsPort: scene.opsPort)
        let skipped = try await purchaseThenRead(scene, key: key, seeds: 3_440..<3_540, concurrency: 4, withToken: false)
        #expect(skipped.failures.isEmpty, "\(skipped.failures.prefix(3))")
        let laggingReads = try await ReadTargets.read(opsPort: scene.opsPort).minus(lagging)
        #expect(laggingReads.counts["primary/replica-lagging", default: 0] >= 50, "a standby 500 ms behind with POSTGRES_READ_MAX_LAG 200ms: \(laggingReads)")
        await scene.finish()
        await Standby.remove()
    }

    @Test("the standby killed mid-run: every read still answers (from the primary), none slower than a second, no error; the standby serves again after it restarts")
    func standbyDies() async throws {
        guard let standby = try await Standby.startIfPossible(applyDelay: "0") else { return }
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI(extra: ["POSTGRES_READ_URL": standby.url(of: scene.scene.database), "CUSTOMER_API_RATE_LIMIT": "0"])
        let key = try await scene.key().secret
        var customers: [String] = []
        for seed in 5_000..<5_020 {
            let customer = UUID().uuidString.lowercased()
            let answer = try await scene.purchase(currentPeriod(seed: seed, token: customer), customer: customer, key: key)
            #expect(answer.status == 200, "\(answer.json.serialized)")
            customers.append(customer)
        }
        try await Task.sleep(for: .seconds(1))

        // Four readers for the whole run; the standby dies after 1.5 s and is back after 4 s.
        let (port, bundleId, readCustomers) = (scene.port, scene.bundleId, customers)
        let clock = ContinuousClock()
        let started = clock.now
        let runFor = Duration.seconds(12)
        let readers = Task {
            try await withThrowingTaskGroup(of: (reads: Int, errors: [String], slowest: Duration).self) { group in
                for reader in 0..<4 {
                    group.addTask {
                        var (reads, errors, slowest) = (0, [String](), Duration.zero)
                        while clock.now - started < runFor {
                            let customer = readCustomers[(reads * 4 + reader) % readCustomers.count]
                            let begun = clock.now
                            let read = try await HTTPTestConnection(port: port).send(
                                method: "GET", path: "/v1/apps/\(bundleId)/customers/\(customer)", headers: ["Authorization": "Bearer " + key])
                            slowest = max(slowest, clock.now - begun)
                            let subscriptions = (try? StrictJSONParser().parseObject(read.body))?["subscriptions"]?.arrayValue ?? []
                            if read.status != 200 || subscriptions.count != 1 { errors.append("\(read.status) \(read.bodyText.prefix(200))") }
                            reads += 1
                        }
                        return (reads, errors, slowest)
                    }
                }
                return try await group.reduce(into: (reads: 0, errors: [String](), slowest: Duration.zero)) { total, one in
                    total = (total.reads + one.reads, total.errors + one.errors, max(total.slowest, one.slowest))
                }
            }
        }
        try await Task.sleep(until: started + .milliseconds(1_500))
        try await standby.stop()
        let stopped = try await ReadTargets.read(opsPort: scene.opsPort)
        try await Task.sleep(until: started + .seconds(4))
        let down = try await ReadTargets.read(opsPort: scene.opsPort).minus(stopped)
        try await standby.start()
        let restarted = try await ReadTargets.read(opsPort: scene.opsPort)
        let outcome = try await readers.value
        let after = try await ReadTargets.read(opsPort: scene.opsPort).minus(restarted)

        #expect(outcome.errors.isEmpty, "\(outcome.errors.count) failed reads: \(outcome.errors.prefix(3))")
        #expect(outcome.slowest < .seconds(1), "the slowest read took \(outcome.slowest)")
        #expect(outcome.reads > 200, "\(outcome.reads) reads")
        // While it was down (after the first second of its absence) the primary answered every read.
        #expect(down.target("primary") > 0 && down.target("replica") <= 2, "\(down)")
        // Back: the standby serves again before the run ends.
        #expect(after.target("replica") > 0, "the standby never served again after its restart: \(after)")
        let metrics = try await HTTPTestConnection(port: scene.opsPort).send(method: "GET", path: "/metrics").bodyText
        #expect(metrics.contains("postgres_replica_lag_seconds{replica=\"replica-1\"}") && metrics.contains("postgres_replica_up{replica=\"replica-1\"} 1"), "\(metrics.prefix(3000))")
        await scene.finish()
        await Standby.remove()
    }

    @Test("the console with POSTGRES_READ_URL: pages read from the standby; an action answers with its Consistency-Token and a cookie, and the pages read with it show the action")
    func consolePages() async throws {
        guard let standby = try await Standby.startIfPossible(applyDelay: "500ms") else { return }
        let scene = try await CustomerAPIScene(bootstrap: bootstrap, postgresURL: postgresURL)
        try await scene.startAPI()
        let key = try await scene.key().secret
        let customer = UUID().uuidString.lowercased()
        let event = currentPeriod(seed: 7_000, token: customer)
        #expect(try await scene.purchase(event, customer: customer, key: key).status == 200)
        _ = try await scene.query("INSERT INTO webhook_endpoints (id, url, secret) VALUES ('we_replica', 'https://hooks.example.com/appstore', 'whsec_test') RETURNING id", as: String.self)
        let added = try await scene.run(["operators", "add", "--email", "support@example.com", "--role", "support", "--json"])
        let password = try #require(try StrictJSONParser().parseObject(Array((added.output.split(separator: "\n").last.map(String.init) ?? "").utf8))["password"]?.stringValue)
        let (port, opsPort) = (TestServices.freePort(), TestServices.freePort())
        let console = try await ChildProcess.start(
            binary: repositoryRoot.appendingPathComponent(".build/debug/console").path,
            environment: [
                "KAFKA_BOOTSTRAP_SERVERS": scene.fixture.bootstrap, "NOTIFICATIONS_TOPIC": scene.fixture.topic, "POSTGRES_URL": scene.scene.database,
                "POSTGRES_READ_URL": standby.url(of: scene.scene.database), "APPS": WorkerProcessFixture.apps, "TRUSTED_ROOTS": scene.fixture.rootFile,
                "CONSOLE_HOST": "127.0.0.1", "CONSOLE_PORT": String(port), "CONSOLE_OPS_PORT": String(opsPort), "CONSOLE_ALLOW_HTTP": "true",
            ],
            logFile: scene.fixture.directory + "/console.log", listeningOn: port)
        // The standby has replayed the purchase, the endpoint and the operator once its delay has passed.
        try await Task.sleep(for: .seconds(2))
        let signIn = try await HTTPTestConnection(port: port).send(
            path: "/login", headers: ["Content-Type": "application/x-www-form-urlencoded"],
            body: Array("email=support%40example.com&password=\(password.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)".utf8))
        let session = try #require(signIn.headers["set-cookie"]?.split(separator: ";").first.map(String.init), "\(signIn.status) \(signIn.bodyText.prefix(300))")
        let page = "/apps/\(scene.bundleId)/subscriptions/\(event.originalTransactionId)"

        let quiet = try await ReadTargets.read(opsPort: opsPort)
        let shown = try await HTTPTestConnection(port: port).send(method: "GET", path: page, headers: ["Cookie": session])
        #expect(shown.status == 200 && shown.bodyText.contains(event.originalTransactionId), "\(shown.status)")
        let pageReads = try await ReadTargets.read(opsPort: opsPort).minus(quiet)
        #expect(pageReads.target("replica") > 0 && pageReads.target("primary") == 0, "a page of rows older than the standby's delay: \(pageReads)")

        // An action (re-send this subscription's events to an endpoint): its answer carries the token and the cookie.
        let csrf = try #require(shown.bodyText.range(of: "name=\"csrf\" value=\"").map { String(shown.bodyText[$0.upperBound...].prefix { $0 != "\"" }) })
        let reason = "replica-check-\(UUID().uuidString.prefix(8))"
        let acted = try await HTTPTestConnection(port: port).send(
            path: page, headers: ["Cookie": session, "Content-Type": "application/x-www-form-urlencoded"],
            body: Array("csrf=\(csrf)&action=resend-webhooks&endpoint=we_replica&reason=\(reason)".utf8))
        #expect(acted.status == 200, "\(acted.status) \(acted.bodyText.prefix(400))")
        let token = try #require(acted.headers["consistency-token"], "\(acted.headers)")
        let cookie = try #require(acted.headers["set-cookie"]?.split(separator: ";").first.map(String.init), "\(acted.headers)")
        #expect(cookie == "consistency_token=" + token, "\(cookie)")
        // The audit right after the action, with the action's cookie: it shows the action (the standby, 500 ms
        // behind, could not have it yet, so the primary or a wait answered).
        let before = try await ReadTargets.read(opsPort: opsPort)
        let audit = try await HTTPTestConnection(port: port).send(method: "GET", path: "/audit", headers: ["Cookie": session + "; " + cookie])
        #expect(audit.status == 200 && audit.bodyText.contains(reason), "the audit read with the action's token does not show it")
        let auditReads = try await ReadTargets.read(opsPort: opsPort).minus(before)
        #expect(auditReads.reason("token-behind") + auditReads.reason("token-waited") + auditReads.reason("token-replayed") > 0, "\(auditReads)")
        await ChildProcess.terminate(console)
        await scene.finish()
        await Standby.remove()
    }
}
