import AppStoreNotifications
import Foundation
import KafkaClient
import NotificationIngest
import NotificationRecords
import PipelineConfiguration
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
import PipelineTestSupport
import TestGates
#endif

@Suite("Ingest against a real broker", .serialized, .requiresKafka)
struct IngestTests {
    func bootstrap() throws -> String {
        try RequiredServices.bootstrap
    }

    /// Whether ingest's cheap shape check should pass, decided independently of the code under test.
    static func looksLikeCompactJWS(_ text: String) -> Bool {
        let segments = text.split(separator: ".", omittingEmptySubsequences: false)
        return segments.count == 3 && segments.allSatisfy { !$0.isEmpty && $0.allSatisfy { $0.isLetter && $0.isASCII || $0.isNumber && $0.isASCII || $0 == "-" || $0 == "_" } }
    }

    @Test("every shared vector gets the right status; accepted bodies land byte-identical, keyed by subscription")
    func vectors() async throws {
        let bootstrap = try bootstrap()
        let directory = sharedVectors.appendingPathComponent("generated/vectors")
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil).filter { $0.pathExtension == "json" }.sorted { $0.path < $1.path }
        #expect(files.count >= 150, "shared vectors missing at \(directory.path)")
        let ingest = try await RunningIngest.start(bootstrap: bootstrap)
        let connection = HTTPTestConnection(port: ingest.port)
        var accepted: [String: String?] = [:]  // signedPayload -> expected key (nil: not checked)
        for file in files {
            let vector = try StrictJSONParser().parseObject([UInt8](try Data(contentsOf: file)))
            let body: [UInt8]
            let expected: Int
            var signedPayload: String?
            if let httpBody = vector["httpBody"]?.stringValue {
                body = Array(httpBody.utf8)
                signedPayload = vector["signedPayload"]?.stringValue
                expected = vector["expect"] == .string("accept") ? 200 : 400
            } else {
                let payload = try #require(vector["signedPayload"]?.stringValue)
                body = notificationBody(payload)
                signedPayload = payload
                expected = body.count <= 256 * 1024 && Self.looksLikeCompactJWS(payload) ? 200 : 400
            }
            let response: HTTPTestConnection.Response
            do {
                response = try await connection.send(path: "/v2/notifications", headers: jsonHeaders, body: body)
            } catch {
                Issue.record("\(file.lastPathComponent): \(error)")
                continue
            }
            #expect(response.status == expected, "\(file.lastPathComponent): \(response.bodyText.prefix(200))")
            if response.status == 400 {
                let error = try StrictJSONParser().parseObject(response.body)
                #expect(error["error"]?.stringValue != nil && error["reason"]?.stringValue != nil)
            }
            if response.status == 200, let signedPayload {
                // The key the vector's own decoded content implies (accepts); forged ones are only checked as bytes.
                let decoded = vector["decoded"]?.objectValue
                // Without a transaction: the app transaction (appData), the mass extension (summary), the external token.
                let payload = decoded?["payload"]?.objectValue
                let key = decoded.flatMap {
                    $0["transactionInfo"]?.objectValue?["originalTransactionId"]?.stringValue
                        ?? $0["appTransactionInfo"]?.objectValue?["appTransactionId"]?.stringValue
                        ?? payload?["summary"]?.objectValue?["requestIdentifier"]?.stringValue
                        ?? payload?["externalPurchaseToken"]?.objectValue?["externalPurchaseId"]?.stringValue
                        ?? payload?["notificationUUID"]?.stringValue
                }
                accepted[signedPayload] = key
            }
        }
        let records = try await readTopic(bootstrap, topic: ingest.topic, atLeast: accepted.count)
        #expect(records.count == accepted.count, "exactly one record per 200")
        for record in records {
            let value = String(decoding: record.value, as: UTF8.self)
            #expect(accepted.keys.contains(value), "a record no 200 answered for")
            if let expectedKey = accepted[value] ?? nil {
                #expect(record.key.map { String(decoding: $0, as: UTF8.self) } == expectedKey)
            }
            #expect(record.headers.string(NotificationRecordHeader.requestId) != nil)
            #expect(record.headers.string(NotificationRecordHeader.ingestInstance) == "ingest-test")
            #expect(record.headers.string(NotificationRecordHeader.receivedAt).flatMap { Int64($0) } != nil)
        }
        try await ingest.stop()
    }

    @Test("a wrong method is 405, a wrong content type 415, an environment path adds its hint")
    func methodsAndTypes() async throws {
        let bootstrap = try bootstrap()
        let ingest = try await RunningIngest.start(bootstrap: bootstrap)
        let connection = HTTPTestConnection(port: ingest.port)
        #expect(try await connection.send(method: "GET", path: "/v2/notifications").status == 405)
        #expect(try await connection.send(path: "/v2/notifications", headers: ["Content-Type": "text/plain"], body: notificationBody("a.b.c")).status == 415)
        #expect(try await connection.send(method: "GET", path: "/health/live").status == 200)
        #expect(try await connection.awaitStatus(200, path: "/health/ready") == 200)
        #expect(try await connection.send(path: "/v2/notifications/sandbox", headers: jsonHeaders, body: notificationBody("eyJh.eyJi.c2ln")).status == 200)
        let metrics = try await connection.send(method: "GET", path: "/metrics").bodyText
        #expect(metrics.contains("ingest_requests_total{status=\"405\"") && metrics.contains("ingest_produce_duration_seconds"))
        let records = try await readTopic(bootstrap, topic: ingest.topic, atLeast: 1)
        #expect(records.count == 1 && records.first?.headers.string(NotificationRecordHeader.environmentHint) == "Sandbox")
        try await ingest.stop()
    }

    @Test("broker down: 503 with Retry-After within the produce timeout; back up: 200 again without a restart")
    func brokerDown() async throws {
        _ = try bootstrap()
        let broker = try #require(PrivateKafkaBroker(persistent: true), "PIPELINE_TANSU_BIN/PIPELINE_OBJECT_STORE_BIN not set (scripts/services.sh env)")
        try await broker.start()
        let ingest = try await RunningIngest.start(bootstrap: broker.bootstrapServers) { $0.produceTimeout = .seconds(2) }
        let connection = HTTPTestConnection(port: ingest.port)
        var acknowledged: Set<String> = []
        func post(_ index: Int) async throws -> Int {
            let payload = "eyJh.eyJ\(index).c2ln"
            let status = try await connection.send(path: "/v2/notifications", headers: jsonHeaders, body: notificationBody(payload), timeoutSeconds: 30).status
            if status == 200 { acknowledged.insert(payload) }
            return status
        }
        #expect(try await post(0) == 200)

        broker.kill()
        let start = ContinuousClock.now
        let down = try await connection.send(path: "/v2/notifications", headers: jsonHeaders, body: notificationBody("eyJh.eyJkb3du.c2ln"), timeoutSeconds: 30)
        #expect(down.status == 503)
        #expect(down.headers["retry-after"] == "60")
        #expect(ContinuousClock.now - start < .seconds(2 + 5), "answered within the 2 s produce timeout (plus slack)")
        #expect(try await connection.send(method: "GET", path: "/health/ready").status == 503)

        try await broker.start()
        var recovered = false
        for index in 1...15 where !recovered { recovered = try await post(index) == 200 }
        #expect(recovered, "ingest stores again once the broker is back, without a restart")
        let records = try await readTopic(broker.bootstrapServers, topic: ingest.topic, atLeast: acknowledged.count)
        #expect(acknowledged.isSubset(of: Set(records.map { String(decoding: $0.value, as: UTF8.self) })), "every 200 is in the topic")
        try await ingest.stop()
        broker.kill()
    }

    @Test("10 000 concurrent 18 KB notifications: exactly 10 000 records, none lost, none doubled")
    func concurrentLoad() async throws {
        let bootstrap = try bootstrap()
        let count = 10_000
        let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: ingestTestLogger)
        let topic = TestServices.uniqueName("notifications")
        _ = try await admin.createTopics([.init(name: topic, partitions: 6)])
        await admin.close()
        let ingest = try await RunningIngest.start(bootstrap: bootstrap, topic: topic)
        let bodies = try NotificationMinter.realisticBodies(count: count)
        let outcomes = await HTTPLoad.run(port: ingest.port, count: count, concurrency: 64) { index in ("/v2/notifications", jsonHeaders, bodies[index]) }
        let okay = outcomes.filter { $0.status == 200 }
        #expect(okay.count == count, "statuses: \(Dictionary(grouping: outcomes, by: { $0.status ?? -1 }).mapValues(\.count)), first error: \(outcomes.first { $0.error != nil }?.error ?? "none")")
        let records = try await readTopic(bootstrap, topic: topic, atLeast: count, timeout: .seconds(120))
        #expect(records.count == count)
        let expected = Set(bodies.map { Array($0) })
        let values = records.map { notificationBody(String(decoding: $0.value, as: UTF8.self)) }
        #expect(Set(values) == expected, "the topic holds exactly the bodies sent")
        try await ingest.stop()
    }

    /// Starts the ingest binary with `INGEST_SHUTDOWN_DRAIN_MS` set to `drainMilliseconds`.
    func startIngestProcess(drainMilliseconds: Int) throws -> (process: Process, port: Int, topic: String) {
        let binary = repositoryRoot.appendingPathComponent(".build/debug/ingest").path
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the ingest executable first (scripts/test.sh does)")
        let port = TestServices.freePort()
        let topic = TestServices.uniqueName("notifications")
        let process = try ChildProcess.startIngest(
            binary: binary, bootstrap: try bootstrap(), port: port, topic: topic, environment: ["INGEST_SHUTDOWN_DRAIN_MS": String(drainMilliseconds)])
        return (process, port, topic)
    }

    /// The promise without a drain: SIGTERM under load, every 200 is in the topic, whatever was not answered 200
    /// was refused (503) or had its connection closed, and once the process is gone nothing is accepted. Nothing
    /// here depends on how many requests the shutdown happens to catch: that is the machine's speed, not the promise.
    @Test("SIGTERM under load with no drain: every 200 is in the topic, the rest refused or closed, exit 0")
    func sigtermUnderLoadWithoutDrain() async throws {
        let (process, port, topic) = try startIngestProcess(drainMilliseconds: 0)
        let bodies = try NotificationMinter.realisticBodies(count: 3_000)
        let pid = process.processIdentifier
        let signalAfter = bodies.count / 4
        let outcomes = await HTTPLoad.run(
            port: port, count: bodies.count, concurrency: 32, timeoutSeconds: 20,
            onAnswered: { answered in if answered == signalAfter { kill(pid, SIGTERM) } }
        ) { index in ("/v2/notifications", jsonHeaders, bodies[index]) }
        try await DedicatedThread.run { process.waitUntilExit() }
        #expect(process.terminationStatus == 0, "graceful exit")
        let okay = outcomes.filter { $0.status == 200 }
        // The signal is sent from the answer of the `signalAfter`-th response, so at least that many were 200.
        #expect(okay.count >= signalAfter, "\(okay.count) answered 200 before and after the signal")
        let unexpected = outcomes.filter { $0.status != nil && $0.status != 200 && $0.status != 503 }
        #expect(unexpected.isEmpty, "only 200, 503 or a closed connection: \(unexpected.prefix(3).map { $0.status ?? -1 })")
        let after = HTTPTestConnection(port: port)
        await #expect(throws: (any Error).self, "the process is gone: a new request finds nobody listening") {
            try await after.send(path: "/v2/notifications", headers: jsonHeaders, body: bodies[0], timeoutSeconds: 5)
        }
        let records = try await readTopic(try bootstrap(), topic: topic, atLeast: okay.count, timeout: .seconds(60))
        let stored = Set(records.map { notificationBody(String(decoding: $0.value, as: UTF8.self)) })
        let missing = okay.filter { !stored.contains(bodies[$0.index]) }
        #expect(missing.isEmpty, "\(missing.count) requests answered 200 are not in the topic")
    }

    /// The promise with a drain: on SIGTERM readiness answers 503 at once, requests keep being answered 200 (and
    /// stored) until the window ends, and the process exits 0 only after the window. The checks are bounds that
    /// hold on any machine: readiness turned before the window ended, no request answered before the window's end
    /// was refused, and the exit came no earlier than the window.
    @Test("SIGTERM with a drain: readiness 503 at once, requests in the window answered 200 and stored, exit 0 after the window")
    func sigtermWithDrain() async throws {
        let drain = Duration.milliseconds(4_000)
        let (process, port, topic) = try startIngestProcess(drainMilliseconds: 4_000)
        let bodies = try NotificationMinter.realisticBodies(count: 200)
        let connection = HTTPTestConnection(port: port)
        #expect(try await connection.send(path: "/v2/notifications", headers: jsonHeaders, body: bodies[0]).status == 200)
        #expect(try await connection.awaitStatus(200, path: "/health/ready") == 200)

        kill(process.processIdentifier, SIGTERM)
        let signalled = ContinuousClock.now
        var readinessTurned: Duration?
        while readinessTurned == nil, process.isRunning, ContinuousClock.now - signalled < drain {
            if (try? await HTTPTestConnection(port: port).send(method: "GET", path: "/health/ready", timeoutSeconds: 2).status) == 503 {
                readinessTurned = ContinuousClock.now - signalled
            } else {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        #expect(readinessTurned != nil, "readiness answered 503 inside the drain window")

        // Requests sent in the first half of the window, each on a new connection (as a load balancer that has not
        // noticed yet would): every one answered before the window ended must be a 200.
        var okay: [Int] = [0]
        var refusedInWindow: [String] = []
        var index = 1
        while ContinuousClock.now - signalled < drain / 2, index < bodies.count {
            do {
                let response = try await HTTPTestConnection(port: port).send(path: "/v2/notifications", headers: jsonHeaders, body: bodies[index], timeoutSeconds: 10)
                if response.status == 200 { okay.append(index) } else if ContinuousClock.now - signalled < drain { refusedInWindow.append("\(response.status)") }
            } catch {
                if ContinuousClock.now - signalled < drain { refusedInWindow.append("\(error)") }
            }
            index += 1
        }
        #expect(refusedInWindow.isEmpty, "requests inside the window were refused: \(refusedInWindow.prefix(3))")
        #expect(okay.count > 1, "at least one request was sent and answered inside the window")

        try await DedicatedThread.run { process.waitUntilExit() }
        let exitedAfter = ContinuousClock.now - signalled
        #expect(process.terminationStatus == 0, "graceful exit")
        #expect(exitedAfter >= drain, "the process kept serving for the whole window (exited after \(exitedAfter))")
        let records = try await readTopic(try bootstrap(), topic: topic, atLeast: okay.count, timeout: .seconds(60))
        let stored = Set(records.map { notificationBody(String(decoding: $0.value, as: UTF8.self)) })
        #expect(okay.allSatisfy { stored.contains(bodies[$0]) }, "every request answered 200 is in the topic")
    }
}

@Suite("Ingest configuration")
struct IngestConfigurationTests {
    @Test("defaults, overrides and errors that name the variable")
    func environment() throws {
        let configuration = try IngestConfiguration.fromEnvironment(EnvironmentReader(["KAFKA_BOOTSTRAP_SERVERS": "a:9092,b:9092", "INGEST_PORT": "9000", "KAFKA_CONFIG_SASL_USERNAME": "ingest"]))
        #expect(configuration.kafka.bootstrapServers == ["a:9092", "b:9092"])
        #expect(configuration.port == 9000 && configuration.maximumBodyBytes == 262_144 && configuration.produceTimeout == .seconds(10))
        #expect(configuration.producerConfiguration.client.additionalConfig["sasl.username"] == "ingest")
        #expect(configuration.producerConfiguration.acks == "all" && configuration.producerConfiguration.enableIdempotence)
        // The settings the guarantees rest on cannot be overridden through KAFKA_CONFIG_*.
        let protected = ["KAFKA_CONFIG_ENABLE_AUTO_OFFSET_STORE", "KAFKA_CONFIG_ENABLE_AUTO_COMMIT", "KAFKA_CONFIG_ENABLE_IDEMPOTENCE", "KAFKA_CONFIG_ACKS", "KAFKA_CONFIG_GROUP_ID"]
            .map { (["KAFKA_BOOTSTRAP_SERVERS": "a:1", $0: "x"], $0) }
        for (environment, variable) in [([String: String](), "KAFKA_BOOTSTRAP_SERVERS"), (["KAFKA_BOOTSTRAP_SERVERS": "a:1", "INGEST_PORT": "http"], "INGEST_PORT")] + protected {
            do {
                _ = try IngestConfiguration.fromEnvironment(EnvironmentReader(environment))
                Issue.record("accepted \(environment)")
            } catch {
                #expect(error.variable == variable)
            }
        }
    }

    @Test("the routing key is the subscription's originalTransactionId, else the notificationUUID; implausible ones (control characters, over 128 bytes) are skipped")
    func routingKey() throws {
        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain())
        let event = NotificationMinter.SubscriptionEvent.sample(seed: 8)
        #expect(UnverifiedPeek.partitionKey(ofNotification: minter.signedNotification(event)) == event.originalTransactionId)
        var payload = minter.payload(event)
        payload["data"] = nil
        #expect(UnverifiedPeek.partitionKey(ofNotification: minter.chain.sign(payload)) == event.notificationUUID)
        #expect(UnverifiedPeek.partitionKey(ofNotification: "not.a.jws") == nil)
        // Only a plausible key counts (1 to 128 bytes of printable ASCII); anything else routes as the next one.
        var odd = event
        odd.originalTransactionId = "12\n\u{1b}[31m34"
        #expect(UnverifiedPeek.partitionKey(ofNotification: minter.signedNotification(odd)) == event.notificationUUID)
        odd.originalTransactionId = String(repeating: "7", count: 129)
        #expect(UnverifiedPeek.partitionKey(ofNotification: minter.signedNotification(odd)) == event.notificationUUID)
        odd.notificationUUID = String(repeating: "u", count: 200)
        #expect(UnverifiedPeek.partitionKey(ofNotification: minter.signedNotification(odd)) == nil)
        // Without a transaction, what the notification is about: the app transaction, the mass extension, the token.
        let consent = minter.signedRescindConsent(notificationUUID: "u-1", signedDate: 1_780_000_000_000, appTransactionId: "704100000001")
        #expect(UnverifiedPeek.partitionKey(ofNotification: consent) == "704100000001")
        let summary = minter.signedRenewalExtensionSummary(
            notificationUUID: "u-2", signedDate: 1_780_000_000_000, requestIdentifier: "mass-1", productId: "p", storefronts: [], succeeded: 1, failed: 0)
        #expect(UnverifiedPeek.partitionKey(ofNotification: summary) == "mass-1")
        let token = minter.chain.sign(JSONObject([
            "notificationType": .string("EXTERNAL_PURCHASE_TOKEN"), "subtype": .string("UNREPORTED"), "notificationUUID": .string("u-3"),
            "externalPurchaseToken": .object(JSONObject(["externalPurchaseId": .string("ext-42"), "bundleId": .string(minter.bundleId)])),
        ]))
        #expect(UnverifiedPeek.partitionKey(ofNotification: token) == "ext-42")
    }
}
