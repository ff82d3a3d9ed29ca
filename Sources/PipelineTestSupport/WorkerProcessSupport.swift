import AppStoreNotifications
import Foundation
import KafkaClient
import Logging
import NotificationRecords
import PipelineOperations
import PostgresNIO
import StoreTestSupport
import TestSupport
import Testing

/// A topic pair, a stream of signed notifications in it, and `worker` processes to run against it.
package final class WorkerProcessFixture: @unchecked Sendable {
    package let bootstrap: String
    package let topic = TestServices.uniqueName("notifications")
    package var deadLetterTopic: String { topic + ".dead-letter" }
    /// The entitlement events topic of `topic`'s workers (every fixture has its own).
    package func eventsTopic(_ topic: String? = nil) -> String { (topic ?? self.topic) + ".events" }
    package let directory = NSTemporaryDirectory() + "worker-fixture-\(UUID().uuidString)"
    package var rootFile: String { directory + "/test-root.pem" }
    package let minter: NotificationMinter
    package static let apps = "com.example.pipeline.app:1234567890"
    package let binary = repositoryRoot.appendingPathComponent(".build/debug/worker").path

    /// The authority that issued `minter`'s chain (nil for a fixture sharing another's).
    package let authority: TestCertificateAuthority?

    /// `chainOptions`: how the signing chain is issued (an OCSP responder's URI, say).
    package init(bootstrap: String, chainOptions: TestCertificateAuthority.Options = .init()) throws {
        self.bootstrap = bootstrap
        let authority = try TestCertificateAuthority()
        self.authority = authority
        minter = NotificationMinter(chain: try authority.issueChain(chainOptions))
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try (try authority.rootCertificate.serializeAsPEM().pemString + "\n").write(toFile: rootFile, atomically: true, encoding: .utf8)
    }

    /// A second topic pair signed by the same chain (and trusting the same root).
    package init(bootstrap: String, sharing other: WorkerProcessFixture) throws {
        self.bootstrap = bootstrap
        minter = other.minter
        authority = other.authority
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: other.rootFile, toPath: rootFile)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    package func createTopics(partitions: Int32, topic: String? = nil) async throws {
        let topic = topic ?? self.topic
        let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: ingestTestLogger)
        _ = try await admin.createTopics([
            .init(name: topic, partitions: partitions), .init(name: topic + ".dead-letter", partitions: 1), .init(name: eventsTopic(topic), partitions: partitions),
        ])
        for _ in 0..<50 where try await admin.listTopics()[topic] != Int(partitions) { try await Task.sleep(for: .milliseconds(100)) }
        await admin.close()
    }

    /// Produces `payloads` as ingest would (key = the partition key, `received-at` header), one at a time: the
    /// tansu test broker reports a partition's end as the base offset of its last batch, so records batched
    /// together would make lag and replay counts there look smaller than they are.
    package func produce(_ payloads: some Collection<String>, topic: String? = nil, partition: Int32? = nil) async throws {
        let topic = topic ?? self.topic
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap])), logger: ingestTestLogger)
        for payload in payloads {
            let record = KafkaProducerMessage(
                topic: topic, partition: partition, key: UnverifiedPeek.partitionKey(ofNotification: payload).map { Array($0.utf8) }, value: Array(payload.utf8),
                headers: [KafkaHeader(key: NotificationRecordHeader.receivedAt, string: "1780000000000")], timestamp: 1_780_000_000_000)
            _ = try await producer.sendAndAwait(record)
        }
        await producer.close()
    }

    /// A worker process for `group` writing to `postgresURL`; returns it and its ops port. Its log (LOG_LEVEL=info)
    /// goes to a file of the fixture's directory; `logTail` shows them all when an expectation fails.
    package func startWorker(
        group: String, postgresURL: String, apps: String = WorkerProcessFixture.apps, trustedRoots: String? = nil, topic: String? = nil, batchSize: Int = 100,
        extra: [String: String] = [:]
    ) async throws -> (process: Process, opsPort: Int) {
        let port = TestServices.freePort()
        let topic = topic ?? self.topic
        workerCount += 1
        let process = try await ChildProcess.startWorker(binary: binary, environment: [
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "NOTIFICATIONS_TOPIC": topic, "DEAD_LETTER_TOPIC": topic + ".dead-letter", "WORKER_GROUP_ID": group,
            "EVENTS_TOPIC": eventsTopic(topic), "EVENTS_RELAY_INTERVAL": "50ms",
            "POSTGRES_URL": postgresURL, "APPS": apps, "TRUSTED_ROOTS": trustedRoots ?? rootFile, "WORKER_OPS_HOST": "127.0.0.1", "WORKER_OPS_PORT": String(port),
            "WORKER_BATCH_SIZE": String(batchSize), "WORKER_MAX_BACKOFF": "2s", "WORKER_STORE_TIMEOUT": "3s", "KAFKA_CLIENT_ID": "\(group)-\(workerCount)",
            // Fast group joins and failure detection on the test broker.
            "KAFKA_CONFIG_SESSION_TIMEOUT_MS": "3000", "KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS": "300", "KAFKA_CONFIG_AUTO_COMMIT_INTERVAL_MS": "200",
        ].merging(extra) { _, new in new }, logFile: directory + "/worker-\(workerCount).log")
        logFiles[process.processIdentifier] = directory + "/worker-\(workerCount).log"
        return (process, port)
    }

    /// kill -9 of one of two workers mid-stream: `topic` holds only the first half of the `distinct` notifications
    /// `payloads` starts with when the kill lands, once a tenth of them are stored, so the kill is mid-stream by
    /// construction however fast the machine; the rest is produced after it and a replacement joins. Returns the
    /// running workers (the replacement in the killed one's place) and the ledger's count at the kill.
    package func killOneWorkerMidStream(
        _ payloads: [String], distinct: Int, topic: String, group: String, database: String, batchSize: Int
    ) async throws -> (workers: [Process], storedAtKill: Int) {
        let half = distinct / 2
        try await produce(payloads[..<half], topic: topic)
        var workers = [
            try await startWorker(group: group, postgresURL: database, topic: topic, batchSize: batchSize).process,
            try await startWorker(group: group, postgresURL: database, topic: topic, batchSize: batchSize).process,
        ]
        #expect(try await TestDatabase.waitForLedger(database, count: distinct / 10), "\(logTail())")
        await ChildProcess.kill(workers[0])
        let storedAtKill = await TestDatabase.ledgerCount(database)
        try await produce(payloads[half...], topic: topic)
        workers[0] = try await startWorker(group: group, postgresURL: database, topic: topic).process
        return (workers, storedAtKill)
    }

    private var workerCount = 0
    private var logFiles: [Int32: String] = [:]

    /// How many assignments `worker` has logged so far.
    package func assignmentCount(_ worker: Process) -> Int {
        rebalances(worker).filter { if case .assigned = $0 { true } else { false } }.count
    }

    /// Every rebalance `worker` has taken part in, in order, read back from its log (`KafkaConsumer` logs each as
    /// `partitions assigned: topic[0], topic[2]` or `partitions revoked: …`): an `.assigned([])` is a cooperative
    /// round that gave it nothing new.
    package func rebalances(_ worker: Process) -> [KafkaRebalanceEvent] {
        guard let file = logFiles[worker.processIdentifier], let text = try? String(contentsOfFile: file, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line -> KafkaRebalanceEvent? in
            for (marker, event) in [("partitions assigned: ", KafkaRebalanceEvent.assigned), ("partitions revoked: ", KafkaRebalanceEvent.revoked)] {
                guard let range = line.range(of: marker) else { continue }
                return event(line[range.upperBound...].split(separator: ",").compactMap { entry in
                    // `KafkaTopicPartition.description`: `topic[3]` (a topic name has no brackets).
                    let text = entry.trimmingCharacters(in: .whitespaces)
                    let parts = text.dropLast().split(separator: "[")
                    guard text.hasSuffix("]"), parts.count == 2, let partition = Int32(parts[1]) else { return nil }
                    return KafkaTopicPartition(topic: String(parts[0]), partition: partition)
                })
            }
            return nil
        }
    }

    /// The partitions `worker` owns by its log: its assignments less its revocations.
    package func ownedPartitions(_ worker: Process) -> Set<Int32> {
        var owned: Set<Int32> = []
        for event in rebalances(worker) {
            switch event {
            case .assigned(let partitions): owned.formUnion(partitions.map(\.partition))
            case .revoked(let partitions): owned.subtract(partitions.map(\.partition))
            }
        }
        return owned
    }

    /// Stops `workers` (SIGTERM, graceful) one at a time, each after the others took over the partitions of the
    /// previous one (up to 20 s). The tansu test broker keeps a group stuck for good when a member is shut down in
    /// the middle of the rebalance another member's departure started: the departed member stays its leader, and
    /// no later join (a replay's, the next workers') completes. Kafka would expire that member after its session
    /// timeout; tansu does not.
    package func stopOneByOne(_ workers: [Process]) async {
        for (index, worker) in workers.enumerated() {
            let others = workers[(index + 1)...].filter(\.isRunning)
            let before = others.map(assignmentCount)
            await ChildProcess.terminate(worker)
            let deadline = ContinuousClock.now + .seconds(20)
            while !others.isEmpty, ContinuousClock.now < deadline, zip(others, before).allSatisfy({ assignmentCount($0.0) <= $0.1 }) {
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// The last lines of every worker's log, for failure messages.
    package func logTail(lines: Int = 15) -> String {
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasSuffix(".log") }.sorted()
        return files.map { file in
            let text = (try? String(contentsOfFile: directory + "/" + file, encoding: .utf8)) ?? ""
            return "--- \(file)\n" + text.split(separator: "\n").suffix(lines).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    /// The group's total lag on the topic (nil while the group has no committed offsets yet).
    package func lag(group: String, topic: String? = nil) async throws -> Int64? {
        let topic = topic ?? self.topic
        let admin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: ingestTestLogger)
        let description: KafkaAdminClient.GroupDescription
        do {
            description = try await admin.describeGroup(group, topics: [topic])
        } catch {
            await admin.close()
            throw error
        }
        await admin.close()
        guard description.positions.contains(where: { $0.committed != nil }) else { return nil }
        return description.positions.reduce(0) { $0 + $1.lag }
    }

    /// Waits until `group` has committed every record of the topic; false on timeout.
    package func waitForLag(group: String, topic: String? = nil, timeout: Duration = .seconds(120)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let lag = try? await lag(group: group, topic: topic), lag == 0 { return true }
            try await Task.sleep(for: .milliseconds(300))
        }
        return false
    }

    /// Runs the built `pipelinectl` against the fixture's broker; its exit status and output (stdout + stderr).
    /// A replay refused because the group's members have not left yet is tried again for up to a minute.
    package func pipelinectl(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let binary = repositoryRoot.appendingPathComponent(".build/debug/pipelinectl").path
        var result: (status: Int32, output: String) = (-1, "")
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let outputFile = directory + "/pipelinectl-\(UUID().uuidString).out"
            _ = FileManager.default.createFile(atPath: outputFile, contents: nil)
            let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputFile))
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment
            environment["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
            process.environment = environment
            process.standardOutput = output
            process.standardError = output
            try process.run()
            try? output.close()
            while process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            result = (process.terminationStatus, (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? "")
            guard result.status != 0, result.output.contains("active member") else { return result }
            try await Task.sleep(for: .seconds(1))
        }
        return result
    }

    /// The dead letters written for `group`.
    package func deadLetters(group: String, topic: String? = nil) async throws -> [DeadLetter] {
        try await TopicReader.readAll((topic ?? self.topic) + ".dead-letter", client: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: ingestTestLogger)
            .map(DeadLetter.init).filter { $0.record.headers.string(DeadLetterHeader.consumerGroup) == group }
    }
}

/// What a database holds, minus what legitimately differs between runs: storage times, and each row's event
/// bookkeeping (how many events a subscription has had depends on the order its notifications arrived in: a
/// stale one makes none; the events tests check those).
package struct DatabaseDigest: Equatable, Sendable, CustomStringConvertible {
    package var ledger: Int
    package var notifications: String
    package var transactions: String
    package var entitlements: String
    package var description: String { "ledger \(ledger), notifications \(notifications.prefix(8)), transactions \(transactions.prefix(8)), entitlements \(entitlements.prefix(8))" }
}

package enum TestDatabase {
    /// Creates database `name` on the cluster of `baseURL` and returns its URL.
    package static func create(_ name: String, on baseURL: String) async throws -> String {
        try await FreshDatabase.create(name, on: baseURL, logger: ingestTestLogger)
    }

    /// A database of its own (named from `prefix`) on the test cluster, migrated by `pipelinectl migrate` as an
    /// operator would; returns its URL.
    package static func createMigrated(_ prefix: String) async throws -> String {
        let base = try #require(TestServices.postgresURL, Comment(rawValue: TestServices.missingPostgres))
        let url = try await create(prefix + UUID().uuidString.prefix(8).lowercased(), on: base)
        let migrated = try await runPipelinectl(["migrate"], postgresURL: url)
        try #require(migrated.status == 0, "pipelinectl migrate: \(migrated.output)")
        return url
    }

    package static func with<T: Sendable>(_ url: String, _ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        try await FreshDatabase.withClient(url, logger: ingestTestLogger, body)
    }

    /// Notifications in the ledger (0 before the worker migrated).
    package static func ledgerCount(_ url: String) async -> Int {
        (try? await with(url) { client in
            for try await count in try await client.query("SELECT count(*)::int FROM notification_ledger", logger: ingestTestLogger).decode(Int.self) { return count }
            return 0
        }) ?? 0
    }

    /// `topicRenamed`: the archive's records read from topic `from` count as read from `to` (a phase that
    /// replays the same stream from a topic of its own compares equal to the reference's).
    package static func digest(_ url: String, topicRenamed: (from: String, to: String)? = nil) async throws -> DatabaseDigest {
        let from = topicRenamed?.from ?? ""
        let to = topicRenamed?.to ?? ""
        return try await with(url) { client in
            let rows = try await client.query(
                """
                SELECT (SELECT count(*)::int FROM notification_ledger),
                    (SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT (to_jsonb(n) - 'stored_at'
                        || jsonb_build_object('kafka_topic', CASE WHEN n.kafka_topic = \(from) THEN \(to) ELSE n.kafka_topic END))::text AS x
                        FROM notifications n) s),
                    (SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT to_jsonb(t)::text AS x FROM transactions t) s),
                    (SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT (to_jsonb(e) - 'updated_at' - 'event_sequence' - 'last_event_after')::text AS x FROM entitlements e) s)
                """,
                logger: ingestTestLogger)
            for try await (ledger, notifications, transactions, entitlements) in rows.decode((Int, String, String, String).self) {
                return DatabaseDigest(ledger: ledger, notifications: notifications, transactions: transactions, entitlements: entitlements)
            }
            throw PostgresDigestMissing()
        }
    }

    package struct PostgresDigestMissing: Error {}

    /// Waits until the ledger holds `count` notifications; false on timeout.
    package static func waitForLedger(_ url: String, count: Int, timeout: Duration = .seconds(180), while condition: () -> Bool = { true }) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, condition() {
            if await ledgerCount(url) >= count { return true }
            try await Task.sleep(for: .milliseconds(250))
        }
        return await ledgerCount(url) >= count
    }
}
