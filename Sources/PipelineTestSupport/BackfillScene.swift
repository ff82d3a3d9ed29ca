import AppStoreNotifications
import AppStoreServerAPIModels
import Foundation
import ServiceRuntime
import PostgresNIO
import TestSupport
import Testing

package final class BackfillScene: @unchecked Sendable {
    package let fixture: WorkerProcessFixture
    package let apple: FakeAppleFixture
    package let database: String
    package let keyFile: String
    package var ingest: RunningIngest?
    /// The port of the ingest process `startIngestProcess` started.
    package private(set) var ingestProcessPort: Int?
    package var workers: [Process] = []
    package var opsPorts: [Int] = []
    package let group = TestServices.uniqueName("backfill")

    /// `workerHeals`: the worker gets the `APPSTORE_*` key of the fake Apple (and a fast `HEAL_INTERVAL_MS`), so
    /// it heals contradicted rows by itself.
    /// `workerEnvironment`: added to the worker's (tracing's `OTEL_*`, say).
    package init(
        bootstrap: String, postgresURL: String, sharing other: WorkerProcessFixture? = nil, withWorker: Bool = true, workerHeals: Bool = false,
        workerEnvironment: [String: String] = [:]
    ) async throws {
        fixture = try other.map { try WorkerProcessFixture(bootstrap: bootstrap, sharing: $0) } ?? WorkerProcessFixture(bootstrap: bootstrap)
        try await fixture.createTopics(partitions: 3)
        database = try await TestDatabase.create("b" + UUID().uuidString.prefix(8).lowercased(), on: postgresURL)
        apple = try await FakeAppleFixture(minter: fixture.minter)
        keyFile = try apple.writeKey(to: fixture.directory)
        if withWorker {
            let heal = workerHeals ? apple.environment(keyFile: keyFile).merging(["HEAL_INTERVAL_MS": "200", "HEAL_RETRY_AFTER_MS": "2000", "APPSTORE_RATE_LIMIT_STATUSES": "100"]) { _, new in new } : [:]
            let (worker, port) = try await fixture.startWorker(group: group, postgresURL: database, extra: heal.merging(workerEnvironment) { _, new in new })
            workers.append(worker)
            opsPorts.append(port)
            // Ready means migrated: a test that runs pipelinectl at once (reconcile, import) would otherwise meet
            // an empty schema while the worker is still applying migrations.
            var ready = false
            for _ in 0..<200 where !ready && worker.isRunning {
                ready = (try? await HTTPTestConnection(port: port).send(method: "GET", path: "/health/ready", timeoutSeconds: 2).status) == 200
                if !ready { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(ready, "the worker did not become ready (migrated, broker reachable)\n\(fixture.logTail())")
        } else {
            let migrate = try await run(["migrate"])
            #expect(migrate.status == 0, "pipelinectl migrate: \(migrate.output)")
        }
    }

    package func startIngest() async throws {
        let ingest = try await RunningIngest.start(bootstrap: fixture.bootstrap, topic: fixture.topic)
        // Ready as a deployment would be before taking traffic: its producer has reached the broker (the first send
        // would otherwise also pay for the connection and the metadata: ≈0.5 s here).
        var reachable = false
        for _ in 0..<30 where !reachable { reachable = await ingest.producer.checkBrokerReachable() }
        #expect(reachable, "ingest's producer did not reach the broker")
        self.ingest = ingest
        apple.fake.setIngestURL("http://127.0.0.1:\(ingest.port)/v2/notifications")
    }

    /// Starts the `ingest` executable (a process of its own, with `environment` added) and points "Apple" at it.
    package func startIngestProcess(environment: [String: String] = [:]) throws -> Process {
        let port = TestServices.freePort()
        let process = try ChildProcess.startIngest(
            binary: repositoryRoot.appendingPathComponent(".build/debug/ingest").path, bootstrap: fixture.bootstrap, port: port, topic: fixture.topic,
            environment: environment)
        apple.fake.setIngestURL("http://127.0.0.1:\(port)/v2/notifications")
        ingestProcessPort = port
        return process
    }

    /// "Apple" sends `signedPayload` until ingest answers 200, at most four times: a loaded machine may answer
    /// later than the fake's 10 s, and Apple retries (on its own schedule; here at once). Each attempt is recorded.
    package func deliver(_ signedPayload: String) async -> SendAttemptResult {
        var result = await apple.fake.send(signedPayload)
        for _ in 0..<3 where result != .success { result = await apple.fake.send(signedPayload) }
        return result
    }

    package func stopIngest() async throws {
        try await ingest?.stop()
        ingest = nil
    }

    package var environment: [String: String] {
        var environment = apple.environment(keyFile: keyFile)
        environment["KAFKA_BOOTSTRAP_SERVERS"] = fixture.bootstrap
        environment["POSTGRES_URL"] = database
        environment["NOTIFICATIONS_TOPIC"] = fixture.topic
        return environment
    }

    /// Starts `pipelinectl arguments` with the scene's environment (plus `extra`); stdout and stderr to one file.
    package func start(_ arguments: [String], extra: [String: String] = [:]) throws -> (Process, String) {
        let outputFile = fixture.directory + "/pipelinectl-\(UUID().uuidString).out"
        _ = FileManager.default.createFile(atPath: outputFile, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputFile))
        let process = Process()
        process.executableURL = repositoryRoot.appendingPathComponent(".build/debug/pipelinectl")
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment.merging(extra) { _, new in new }) { _, new in new }
        process.standardOutput = output
        process.standardError = output
        try process.run()
        try? output.close()
        return (process, outputFile)
    }

    package func run(_ arguments: [String], extra: [String: String] = [:], timeout: Duration = .seconds(120)) async throws -> (status: Int32, output: String) {
        let (process, outputFile) = try start(arguments, extra: extra)
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { await ChildProcess.kill(process) }
        return (process.terminationStatus, (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? "")
    }

    /// The JSON summary line of `pipelinectl backfill --json` in `output`.
    package func summary(_ output: String) -> JSONObject? {
        output.split(separator: "\n").reversed().lazy.compactMap { try? StrictJSONParser().parseObject(Array($0.utf8)) }.first
    }

    /// Kills `process` (kill -9) once the whole number `sql` reads has reached `mark` (a checkpoint's progress), or
    /// when the process ended or a minute passed. Polled every 20 ms, so the kill lands mid-run.
    package func kill(_ process: Process, whenProgress sql: String, reaches mark: Int) async throws {
        var progress = 0
        let deadline = ContinuousClock.now + .seconds(60)
        while progress < mark, process.isRunning, ContinuousClock.now < deadline {
            progress = try await query(sql, as: Int.self).first ?? 0
            try await Task.sleep(for: .milliseconds(20))
        }
        await ChildProcess.kill(process)
    }

    package func query<T: Sendable>(_ sql: String, as type: T.Type) async throws -> [T] where T: PostgresDecodable {
        try await TestDatabase.with(database) { client in
            var values: [T] = []
            for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: ingestTestLogger).decode(T.self) { values.append(value) }
            return values
        }
    }

    /// The archive, transactions and entitlements, without what differs between runs by design: storage and
    /// receipt times, Kafka positions and the source, and each row's event bookkeeping (an outage's backfill
    /// delivers the missed notifications after later ones, so fewer of them make events).
    package func digest() async throws -> [String] {
        try await query(
            """
            SELECT (SELECT count(*)::int FROM notification_ledger)::text UNION ALL
            SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT (to_jsonb(n) - 'stored_at' - 'received_at' - 'kafka_topic' - 'kafka_partition' - 'kafka_offset' - 'source')::text AS x FROM notifications n) s UNION ALL
            SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT to_jsonb(t)::text AS x FROM transactions t) s UNION ALL
            SELECT coalesce(md5(string_agg(x, '|' ORDER BY x)), '') FROM (SELECT (to_jsonb(e) - 'updated_at' - 'event_sequence' - 'last_event_after')::text AS x FROM entitlements e) s
            """, as: String.self)
    }

    package func finish() async {
        await fixture.stopOneByOne(workers)
        try? await stopIngest()
        await apple.fake.stop()
    }
}
