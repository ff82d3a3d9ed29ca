import AppStoreNotifications
import Foundation
import KafkaClient
import PipelineTestSupport
import PostgresNIO
import TestSupport
import Testing
import TestGates

/// The console as an operator uses it: minted lifecycles (duplicates, a stale delivery, forged payloads carrying
/// HTML and script) go through ingest, the worker and PostgreSQL; a `console` process serves them; Debian's chromium,
/// driven by Playwright for Python (scripts/console_browser.py), signs in, searches, reads each timeline's
/// `data-outcome` and `data-deliveries`, re-drives a dead letter, and is refused where it must be.
@Suite("Console: pages in a real browser over real services", .serialized, .requiresKafkaAndPostgres)
struct ConsoleBrowserTests: ProcessSuite {
    static let python = repositoryRoot.appendingPathComponent(".venv/bin/python3").path
    static let script = repositoryRoot.appendingPathComponent("scripts/console_browser.py").path

    @Test("sign-in, search, timelines with outcomes and deliveries, escaped dead letters, a re-drive in the audit; viewers and forged forms refused")
    func browser() async throws {
        let keyFile = try mintedErasureKeyFile()
        defer { removeMintedFile(keyFile) }
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, workerEnvironment: ["ERASURE_KEY_FILE": keyFile])
        try await scene.startIngest()
        let minter = scene.fixture.minter
        // Three subscriptions' lifecycles; of each, the second event is delivered twice (a duplicate) and the third
        // held back and delivered last (older than the row by then: unchanged).
        let events = NotificationMinter.lifecycleEvents(subscriptions: 3, firstSubscription: 7_100)
        let bySubscription = Dictionary(grouping: events, by: \.originalTransactionId).mapValues { $0.sorted { $0.signedDate < $1.signedDate } }
        var expected: [String: [String: [String: Any]]] = [:]
        var held: [NotificationMinter.SubscriptionEvent] = []
        for (subscription, lifecycle) in bySubscription.sorted(by: { $0.key < $1.key }) {
            var rows: [String: [String: Any]] = [:]
            for (index, event) in lifecycle.enumerated() {
                if index == 2 && lifecycle.count > 3 {
                    held.append(event)
                    rows[event.notificationUUID] = ["outcome": "unchanged", "deliveries": 1]
                    continue
                }
                let times = index == 1 ? 2 : 1
                for _ in 0..<times { #expect(await scene.deliver(minter.signedNotification(event)) == .success) }
                rows[event.notificationUUID] = ["outcome": "applied", "deliveries": times]
            }
            expected[subscription] = rows
        }
        for event in held { #expect(await scene.deliver(minter.signedNotification(event)) == .success) }
        // Forged: signed by a chain no configured root trusts, claiming a real subscription, with markup in its fields.
        let forger = NotificationMinter(chain: try TestCertificateAuthority().issueChain())
        let target = try #require(bySubscription.keys.sorted().first)
        var forged = try #require(bySubscription[target]?.last)
        forged.notificationUUID = "<script>alert(1)</script>"
        forged.productId = "<img src=x onerror=alert(2)>"
        #expect(await scene.deliver(forger.signedNotification(forged)) == .success)
        expected[target]?[forged.notificationUUID] = ["outcome": "dead-lettered", "deliveries": 1]

        let stored = Set(events.map(\.notificationUUID)).count
        #expect(try await TestDatabase.waitForLedger(scene.database, count: stored), "\(scene.fixture.logTail())")
        var deadLettered = 0
        for _ in 0..<100 where deadLettered < 1 {
            deadLettered = try await scene.query("SELECT count(*)::int FROM dead_lettered_records", as: Int.self).first ?? 0
            if deadLettered < 1 { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(deadLettered == 1, "the forged payload is dead-lettered once")
        #expect(try await scene.fixture.waitForLag(group: scene.group))

        // Apple's truth for the reconcile action (the fake App Store Server API), and a webhook endpoint that was sent
        // one of the target's events already (the re-send action puts it back to pending).
        let reconciled = try #require(bySubscription[target]?.last)
        scene.apple.fake.setSubscription(FakeAppStoreServerAPI.Subscription(
            originalTransactionId: target, subscriptionGroupIdentifier: "21000001", status: reconciled.status,
            signedTransactionInfo: minter.chain.sign(minter.transaction(reconciled)), signedRenewalInfo: minter.chain.sign(minter.renewalInfo(reconciled)), history: []))
        let targetEvent = try #require(try await scene.query(
            "SELECT event_id FROM entitlement_events_outbox WHERE original_transaction_id = '\(target)' ORDER BY id LIMIT 1", as: String.self).first)
        _ = try await scene.query("INSERT INTO webhook_endpoints (id, url, secret) VALUES ('we_console', 'https://hooks.example.com/appstore', 'whsec_test') RETURNING id", as: String.self)
        _ = try await scene.query(
            """
            INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, status, attempts, finished_at)
            VALUES ('we_console', '\(targetEvent)', 'entitlement.granted', '\(target)', now(), 0, 0, '{}', 'delivered', 1, now()) RETURNING id::text
            """, as: String.self)

        let support = try await operatorAccount(scene, "support@example.com", role: "support")
        let viewer = try await operatorAccount(scene, "viewer@example.com", role: "viewer")
        let admin = try await operatorAccount(scene, "admin@example.com", role: "admin")
        // The customer the admin erases: the last subscription's (neither the reconcile's nor the re-drive's target).
        let erasedSubscription = try #require(bySubscription.keys.sorted().last)
        let erasedCustomer = try #require(bySubscription[erasedSubscription]?.first?.appAccountToken)
        let port = TestServices.freePort()
        let console = try await ChildProcess.start(
            binary: repositoryRoot.appendingPathComponent(".build/debug/console").path,
            environment: scene.apple.environment(keyFile: scene.keyFile).merging([
                "KAFKA_BOOTSTRAP_SERVERS": scene.fixture.bootstrap, "NOTIFICATIONS_TOPIC": scene.fixture.topic, "POSTGRES_URL": scene.database,
                "APPS": WorkerProcessFixture.apps, "TRUSTED_ROOTS": scene.fixture.rootFile, "CONSOLE_HOST": "127.0.0.1", "CONSOLE_PORT": String(port),
                "CONSOLE_OPS_PORT": String(TestServices.freePort()), "CONSOLE_ALLOW_HTTP": "true", "CONSOLE_LOGIN_ATTEMPTS": "5",
                "ERASURE_KEY_FILE": keyFile,
            ]) { _, new in new },
            logFile: scene.fixture.directory + "/console.log", listeningOn: port)

        let anyEvent = try #require(events.first)
        let transactionId = anyEvent.transactionId
        let eventId = try #require(try await scene.query("SELECT event_id FROM entitlement_events_outbox ORDER BY id LIMIT 1", as: String.self).first)
        let spec: [String: Any] = [
            "url": "http://127.0.0.1:\(port)",
            "support": ["email": "support@example.com", "password": support],
            "viewer": ["email": "viewer@example.com", "password": viewer],
            "admin": ["email": "admin@example.com", "password": admin],
            "eraseCustomer": erasedCustomer,
            "bundleId": minter.bundleId,
            "subscriptions": expected.map { ["id": $0.key, "rows": $0.value] },
            "searches": [
                ["q": target, "path": "/subscriptions/\(target)"],
                ["q": transactionId, "path": "/subscriptions/\(anyEvent.originalTransactionId)"],
                ["q": anyEvent.notificationUUID, "path": "/subscriptions/\(anyEvent.originalTransactionId)"],
                ["q": eventId, "path": "/subscriptions/"],
            ],
            "markup": forged.notificationUUID, "reconcileTarget": target, "resendEndpoint": "we_console",
            "screenshots": ProcessInfo.processInfo.environment["CONSOLE_SCREENSHOTS"] ?? "",
        ]
        let specFile = scene.fixture.directory + "/console-spec.json"
        try JSONSerialization.data(withJSONObject: spec, options: [.sortedKeys]).write(to: URL(fileURLWithPath: specFile))
        let (status, output) = try await Self.runBrowser(specFile)
        let consoleLog = (try? String(contentsOfFile: scene.fixture.directory + "/console.log", encoding: .utf8)) ?? ""
        #expect(status == 0, "scripts/console_browser.py failed:\n\(output)\n--- console.log\n\(consoleLog.suffix(3000))")
        #expect(output.contains("console browser checks: all passed"), "\(output)")
        // The re-drive went through the topic again and was dead-lettered again (same reason), and is audited.
        #expect(try await scene.query("SELECT count(*)::int FROM console_audit WHERE action = 'redrive'", as: Int.self).first ?? 0 >= 1)
        #expect(try await scene.query("SELECT status || ' ' || attempts FROM webhook_deliveries WHERE endpoint_id = 'we_console'", as: String.self) == ["pending 0"])
        // The reconcile's snapshots went through the topic and the worker: the target's timeline has them.
        #expect(try await TestDatabase.waitForLedger(scene.database, count: stored + 1), "the reconcile's snapshot is stored")
        let snapshots = try await scene.query(
            "SELECT count(*)::int FROM notification_archive WHERE original_transaction_id = '\(target)' AND notification_type = 'STATUS_SNAPSHOT'", as: Int.self)
        #expect((snapshots.first ?? 0) >= 1)
        // The admin's erasure: nothing of that customer's subscription left in any table; the audit names the request only.
        let erasedIds = [erasedSubscription, erasedCustomer] + (bySubscription[erasedSubscription] ?? []).map(\.transactionId)
        let left = try await TestDatabase.with(scene.database) { try await DatabaseScan.mentions(of: erasedIds, in: $0) }
        #expect(left.isEmpty, "the erased customer remains in \(left)")
        #expect(try await scene.query("SELECT count(*)::int FROM console_audit WHERE action = 'erase' AND detail ? 'requestId'", as: Int.self).first == 1)

        // The console's re-drive is pipelinectl's: the same headers (the original record's kept, the re-drive's
        // three set; no `source` of its own), and the same re-drive log, so `dlq redrive` finds it done.
        let topicRecords = try await readTopic(scene.fixture.bootstrap, topic: scene.fixture.topic, atLeast: Int.max, timeout: .seconds(3))
        let redrivenRecord = try #require(topicRecords.first { $0.headers.string("redriven-from") != nil }, "the console's re-drive is on the topic")
        let headerNames = Set(redrivenRecord.headers.map(\.key))
        for name in ["received-at", "ingest-instance", "request-id", "redriven-from", "redriven-at", "redrive-count"] {
            #expect(headerNames.contains(name), "the console's re-drive lacks \(name): \(headerNames.sorted())")
        }
        #expect(!headerNames.contains("source") && !headerNames.contains("error-code"), "\(headerNames.sorted())")
        #expect(redrivenRecord.headers.string("redrive-count") == "1")
        #expect(redrivenRecord.headers.string("redriven-from")?.hasPrefix(scene.fixture.topic + ".dead-letter/") == true, "a dead-letter position, as pipelinectl writes it")
        let cliRedrive = try await scene.run(["dlq", "redrive", "--json"], extra: ["ERASURE_KEY_FILE": keyFile])
        #expect(cliRedrive.status == 0, "\(cliRedrive.output)")
        #expect(cliRedrive.output.contains("\"alreadyRedriven\":1"), "one re-drive log: pipelinectl sees the console's: \(cliRedrive.output)")

        // Sign-in hardening (issue 51): a burst of 100 concurrent wrong passwords gets at most CONSOLE_LOGIN_ATTEMPTS (5)
        // checks, the rest 429 at once; a `next` with a tab in it does not leave the origin; a cross-site form is refused.
        func form(_ fields: [(String, String)]) -> [UInt8] {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            return Array(fields.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed)!)" }.joined(separator: "&").utf8)
        }
        let formHeaders = ["Content-Type": "application/x-www-form-urlencoded"]
        let statuses = await withTaskGroup(of: Int.self) { group in
            for index in 0..<100 {
                group.addTask {
                    (try? await HTTPTestConnection(port: port).send(
                        path: "/login", headers: formHeaders, body: form([("email", "viewer@example.com"), ("password", "wrong-\(index)")]))
                    )?.status ?? 0
                }
            }
            var all: [Int] = []
            for await status in group { all.append(status) }
            return all
        }
        let refused = statuses.filter { $0 == 401 }.count
        #expect(refused <= 5 && refused >= 1, "\(refused) wrong passwords were checked (at most 5 may be)")
        #expect(statuses.filter { $0 == 429 }.count == 100 - refused, "\(Dictionary(grouping: statuses, by: { $0 }).mapValues(\.count))")
        let tabbed = try await HTTPTestConnection(port: port).send(
            path: "/login", headers: formHeaders, body: form([("email", "support@example.com"), ("password", support), ("next", "/\t/evil.example")]))
        #expect(tabbed.status == 303 && tabbed.headers["location"] == "/", "next with a tab: \(tabbed.status) \(tabbed.headers["location"] ?? "-")")
        let crossSite = try await HTTPTestConnection(port: port).send(
            path: "/login", headers: formHeaders.merging(["Origin": "https://evil.example"]) { $1 },
            body: form([("email", "support@example.com"), ("password", support)]))
        #expect(crossSite.status == 403, "a sign-in form posted from another site: \(crossSite.status)")
        await ChildProcess.terminate(console)
        await scene.finish()
    }

    /// `pipelinectl operators add`: the one-time password it prints.
    func operatorAccount(_ scene: BackfillScene, _ email: String, role: String) async throws -> String {
        let added = try await scene.run(["operators", "add", "--email", email, "--role", role, "--json"])
        #expect(added.status == 0, "\(added.output)")
        let json = try StrictJSONParser().parseObject(Array((added.output.split(separator: "\n").last.map(String.init) ?? "").utf8))
        return try #require(json["password"]?.stringValue)
    }

    /// Runs the Playwright script with the project's Python (scripts/install.sh put Playwright there).
    static func runBrowser(_ specFile: String) async throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [script, specFile]
        let outputFile = specFile + ".out"
        _ = FileManager.default.createFile(atPath: outputFile, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: outputFile))
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        let deadline = ContinuousClock.now + .seconds(240)
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
        if process.isRunning { await ChildProcess.kill(process) }
        try? handle.close()
        return (process.terminationStatus, (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? "")
    }
}
