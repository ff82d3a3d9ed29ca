import AppStoreNotifications
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import PostgresNIO
import TestSupport

/// The pipeline as the process benchmarks run it: a test PKI and its minter, a fresh topic set and database, the
/// release `worker` on them, the services under test started beside it, and a steady background of other
/// subscriptions' notifications (what the workers must also apply while the figures are taken).
public final class BenchStack: @unchecked Sendable {
    public let work: String
    public let minter: NotificationMinter
    public let topic: String
    public let databaseURL: String
    public let kafka: KafkaClientConfiguration
    /// The settings every process of the stack shares (broker, topics, database, apps, roots).
    public let shared: [String: String]
    public private(set) var processes: [Process] = []
    /// The bench's own logger: critical only (the figures are what it prints).
    public let logger: Logger

    /// A process benchmark's start: its first two arguments are BOOTSTRAP and POSTGRES_URL (`usage` names them and
    /// the rest), on which the stack named `name` starts; returns it with the arguments, for the rest.
    public static func start(name: String, usage: String) async throws -> (BenchStack, BenchArguments) {
        let arguments = BenchArguments(usage: usage, required: 2)
        return (try await BenchStack(name: name, bootstrap: arguments[1], postgresURL: arguments[2]), arguments)
    }

    /// Creates the topics and the database, and starts the worker (which migrates the database).
    public init(name: String, bootstrap: String, postgresURL: String) async throws {
        var logger = Logger(label: "\(name)-bench")
        logger.logLevel = .critical
        self.logger = logger
        work = NSTemporaryDirectory() + "\(name)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let authority = try TestCertificateAuthority()
        minter = NotificationMinter(chain: try authority.issueChain())
        try Data((try authority.rootCertificate.serializeAsPEM().pemString + "\n").utf8).write(to: URL(fileURLWithPath: work + "/root.pem"))
        topic = "bench-\(name)-\(UUID().uuidString.prefix(8))"
        kafka = KafkaClientConfiguration(bootstrapServers: [bootstrap])
        let admin = try KafkaAdminClient(configuration: kafka, logger: logger)
        _ = try await admin.createTopics([.init(name: topic, partitions: 4), .init(name: topic + ".dead-letter", partitions: 1), .init(name: topic + ".events", partitions: 4)])
        await admin.close()
        // BENCH_DATABASE: a book seeded before (`seed-book`), to measure on it; else a new, empty database.
        let database: String
        if let book = ProcessInfo.processInfo.environment["BENCH_DATABASE"], !book.isEmpty {
            database = book
        } else {
            database = "bench_\(UUID().uuidString.prefix(8).lowercased())"
            let postgres = PostgresClient(configuration: try .init(url: postgresURL), backgroundLogger: logger)
            let postgresRunning = Task { await postgres.run() }
            _ = try await postgres.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: logger)
            postgresRunning.cancel()
        }
        databaseURL = String(postgresURL[..<postgresURL.lastIndex(of: "/")!]) + "/" + database
        shared = [
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "NOTIFICATIONS_TOPIC": topic, "POSTGRES_URL": databaseURL, "APPS": "\(minter.bundleId):\(minter.appAppleId)",
            "TRUSTED_ROOTS": work + "/root.pem", "LOG_LEVEL": "error", "EVENTS_TOPIC": topic + ".events",
        ]
        _ = try await start("worker", [
            "WORKER_GROUP_ID": "bench-\(topic)", "WORKER_OPS_HOST": "127.0.0.1", "WORKER_OPS_PORT": String(TestServices.freePort()),
            "KAFKA_CONFIG_SESSION_TIMEOUT_MS": "6000", "KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS": "500",
        ])
    }

    /// Starts the release binary `name` with the shared settings and `environment`; with `opsPort`, waits until its
    /// `/health/ready` answers 200 (at most 30 s: the worker may still be migrating).
    public func start(_ name: String, _ environment: [String: String], opsPort: Int? = nil) async throws -> Process {
        let process = try await ChildProcess.start(
            binary: ChildProcess.pipelineBinary(name), environment: shared.merging(environment) { _, new in new }, logFile: work + "/\(name).log", listeningOn: opsPort)
        processes.append(process)
        if let opsPort {
            let ops = HTTPTestConnection(port: opsPort)
            for _ in 0..<300 {
                if (try? await ops.send(method: "GET", path: "/health/ready"))?.status == 200 { break }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        return process
    }

    /// Notifications of other subscriptions, `perSecond` of them, produced until the task is cancelled.
    public func background(perSecond: Int, firstSubscription: Int) -> Task<Void, any Error> {
        let (kafka, topic, minter, logger) = (kafka, topic, minter, logger)
        return Task {
            let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(client: kafka), logger: logger)
            var seed = firstSubscription
            let start = Int64(Date().timeIntervalSince1970 * 1000) - 40 * 86_400_000
            while !Task.isCancelled {
                let tick = ContinuousClock.now
                for event in NotificationMinter.lifecycleEvents(subscriptions: max(1, perSecond / 10), firstSubscription: seed, start: start) {
                    let payload = minter.signedNotification(event)
                    try? producer.send(KafkaProducerMessage(
                        topic: topic, key: UnverifiedPeek.partitionKey(ofNotification: payload).map { Array($0.utf8) }, value: Array(payload.utf8)))
                }
                seed += max(1, perSecond / 10)
                try? await Task.sleep(until: tick + .milliseconds(300), clock: .continuous)
            }
            await producer.close()
        }
    }

    /// Kills every process of the stack and removes its folder.
    public func stop() {
        for process in processes where process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(atPath: work)
    }
}
