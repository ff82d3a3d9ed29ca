import AppStoreNotifications
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import NotificationPipeline
import PostgresNIO
import ServiceLifecycle
import TestSupport
import Testing

@Suite(
    "Worker end to end: ingest → Kafka → worker → PostgreSQL / dead letters", .serialized,
    .enabled(if: TestServices.runKafkaSuites && TestServices.runPostgresSuites, Comment(rawValue: TestServices.missingKafka)))
struct WorkerEndToEndTests {
    @Test("shared vectors through the whole pipeline: accepts stored, rejects dead-lettered with their code")
    func vectors() async throws {
        let bootstrap = try #require(TestServices.kafkaBootstrapServers, Comment(rawValue: TestServices.missingKafka))
        let postgresURL = try #require(TestServices.postgresURL, Comment(rawValue: TestServices.missingPostgres))
        let logger = ingestTestLogger

        // A database, a topic pair and a group of this test's own.
        let database = "test_" + TestServices.uniqueName("e2e").replacingOccurrences(of: "-", with: "_")
        let admin = PostgresClient(configuration: try .init(url: postgresURL), backgroundLogger: logger)
        var configuration = try PostgresClient.Configuration(url: postgresURL)
        configuration.database = database
        let postgres = PostgresClient(configuration: configuration, backgroundLogger: logger)
        var worker = WorkerConfiguration(kafka: KafkaClientConfigurationValues(bootstrapServers: [bootstrap], clientId: "worker-test"))
        worker.migrateAtStart = false
        worker.topic = TestServices.uniqueName("notifications")
        worker.deadLetterTopic = worker.topic + ".dead-letter"
        worker.groupId = TestServices.uniqueName("workers")
        worker.batchSize = 50
        let kafkaAdmin = try KafkaAdminClient(configuration: KafkaClientConfiguration(bootstrapServers: [bootstrap]), logger: logger)
        _ = try await kafkaAdmin.createTopics([.init(name: worker.topic, partitions: 3), .init(name: worker.deadLetterTopic, partitions: 1)])
        await kafkaAdmin.close()

        // The vectors meant for the default receiver (Production, the steering app).
        let directory = sharedVectors.appendingPathComponent("generated")
        var vectors: [(name: String, object: JSONObject)] = []
        for url in try FileManager.default.contentsOfDirectory(at: directory.appendingPathComponent("vectors"), includingPropertiesForKeys: nil).sorted(by: { $0.path < $1.path }) {
            let object = try StrictJSONParser().parseObject([UInt8](try Data(contentsOf: url)))
            if object["verifier"]?.objectValue?["environment"] == .string("Production") { vectors.append((url.lastPathComponent, object)) }
        }
        #expect(vectors.count > 140)
        let verifier = try SignedPayloadVerifier(
            configuration: .init(
                apps: [AppIdentity(bundleId: "com.example.steering.app", appAppleId: 1_234_567_890, environments: [.production])],
                trustedRoots: [[UInt8](try Data(contentsOf: directory.appendingPathComponent("test-root-ca.der")))]))

        var consumerConfiguration = KafkaConsumerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap]), groupId: worker.groupId)
        consumerConfiguration.sessionTimeoutMilliseconds = 2_000
        consumerConfiguration.heartbeatIntervalMilliseconds = 300
        consumerConfiguration.autoCommitIntervalMilliseconds = 200
        let consumer = try KafkaConsumer(configuration: consumerConfiguration, topics: [worker.topic], logger: logger)
        let deadLetters = try KafkaProducer(configuration: KafkaProducerConfiguration(client: KafkaClientConfiguration(bootstrapServers: [bootstrap])), logger: logger)
        let store = EntitlementStore(client: postgres, logger: logger)
        let service = NotificationWorker(configuration: worker, consumer: consumer, deadLetters: deadLetters, store: store, verifier: verifier, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [admin, postgres, deadLetters, consumer, service], logger: logger))

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: logger)
            try await store.migrate()

            // Everything goes in through the real ingest.
            let ingest = try await RunningIngest.start(bootstrap: bootstrap, topic: worker.topic)
            let connection = HTTPTestConnection(port: ingest.port)
            var expectStored: Set<String> = []  // notificationUUIDs
            var expectDead: [String: String] = [:]  // signedPayload -> vector name
            for (name, vector) in vectors {
                let body = vector["httpBody"].flatMap(\.stringValue).map { Array($0.utf8) } ?? notificationBody(vector["signedPayload"]?.stringValue ?? "")
                let response = try await connection.send(path: "/v2/notifications", headers: jsonHeaders, body: body)
                guard response.status == 200 else { continue }
                let payload = try ResponseBodyV2.parse(body: body).signedPayload
                if vector["expect"] == .string("accept"), let uuid = vector["decoded"]?.objectValue?["payload"]?.objectValue?["notificationUUID"]?.stringValue {
                    expectStored.insert(uuid)
                } else {
                    expectDead[payload] = name
                }
            }
            try await ingest.stop()

            // Wait until every record is either stored or dead-lettered.
            let deadRecords = try await readTopic(bootstrap, topic: worker.deadLetterTopic, atLeast: expectDead.count, timeout: .seconds(90))
            var stored: Set<String> = []
            for _ in 0..<300 {
                stored = []
                for try await uuid in try await postgres.query("SELECT notification_uuid FROM notifications", logger: logger).decode(String.self) { stored.insert(uuid) }
                if stored.count >= expectStored.count { break }
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(stored == expectStored, "missing: \(expectStored.subtracting(stored).count), unexpected: \(stored.subtracting(expectStored).count)")
            #expect(deadRecords.count == expectDead.count, "dead letters \(deadRecords.count), expected \(expectDead.count)")
            for record in deadRecords {
                let payload = String(decoding: record.value, as: UTF8.self)
                #expect(expectDead[payload] != nil, "an accepted notification was dead-lettered: \(record.headers.string(DeadLetterHeader.errorCode) ?? "")")
                #expect(record.headers.string(DeadLetterHeader.errorCode) != nil && record.headers.string(DeadLetterHeader.errorReason) != nil)
                #expect(record.headers.string(DeadLetterHeader.originalTopic) == worker.topic)
                #expect(record.headers.string(DeadLetterHeader.consumerGroup) == worker.groupId)
            }
            // Spot checks of codes: a forged signature and a wrong app.
            let codes = Dictionary(deadRecords.compactMap { record in expectDead[String(decoding: record.value, as: UTF8.self)].map { ($0, record.headers.string(DeadLetterHeader.errorCode) ?? "") } }, uniquingKeysWith: { first, _ in first })
            #expect(codes["101-reject-tampered-signature.json"] == "signatureMismatch")
            #expect(codes["120-reject-wrong-bundle-id.json"] == "bundleIdMismatch")
            #expect(codes["110-reject-nested-transaction-tampered.json"] == "nestedInvalid")

            // The subscription rows exist and TEST/unknown types were archived without an entitlement.
            var entitlements = 0
            for try await count in try await postgres.query("SELECT count(*)::int FROM entitlements", logger: logger).decode(Int.self) { entitlements = count }
            #expect(entitlements > 0)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }
}
