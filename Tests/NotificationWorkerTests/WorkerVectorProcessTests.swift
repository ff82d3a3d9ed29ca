import AppStoreNotifications
import Foundation
import KafkaClient
import NotificationRecords
import ServiceRuntime
import PostgresNIO
import TestSupport
import Testing
import PipelineTestSupport
import TestGates

/// Every generated vector of ../shared/vectors, POSTed through ingest into worker processes (two per receiver
/// configuration), must end exactly as the library says: accepts as rows equal to the vector's decoded content
/// and to the entitlement state machine's result; rejects in the dead-letter topic with the error code the
/// library gives, nothing else anywhere.
@Suite(
    "Worker processes: the shared vectors end to end", .serialized,
    .requiresKafkaAndPostgres)
struct WorkerVectorProcessTests: ProcessSuite {
    struct Vector {
        var name: String
        var body: [UInt8]
        var accept: Bool
        /// The vector file as Foundation objects, for comparing decoded content.
        var object: [String: Any]
    }

    @Test("every generated vector: accepts stored exactly as decoded, rejects dead-lettered with the library's code")
    func vectors() async throws {
        let directory = sharedVectors.appendingPathComponent("generated")
        let rootFile = directory.appendingPathComponent("test-root-ca.der").path
        let fixture = try WorkerProcessFixture(bootstrap: bootstrap)
        let database = try await TestDatabase.create("v" + UUID().uuidString.prefix(8).lowercased(), on: postgresURL)

        // One receiver configuration per environment the vectors name (as a deployment per environment would be).
        var byEnvironment: [String: [Vector]] = [:]
        for url in try FileManager.default.contentsOfDirectory(at: directory.appendingPathComponent("vectors"), includingPropertiesForKeys: nil).sorted(by: { $0.path < $1.path }) {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
            let verifier = try #require(object["verifier"] as? [String: Any])
            #expect(verifier["bundleId"] as? String == "com.example.steering.app" && verifier["appAppleId"] as? Int == 1_234_567_890)
            let body = (object["httpBody"] as? String).map { Array($0.utf8) } ?? notificationBody(object["signedPayload"] as? String ?? "")
            byEnvironment[verifier["environment"] as? String ?? "", default: []].append(
                Vector(name: url.lastPathComponent, body: body, accept: object["expect"] as? String == "accept", object: object))
        }
        #expect(byEnvironment.values.map(\.count).reduce(0, +) == 154, "all 154 generated vectors")

        var expectedStored: [String: Vector] = [:]  // notificationUUID → vector
        var expectedDead: [String: (code: String, vector: String)] = [:]  // signedPayload → the library's code
        var expectedEntitlements: [String: EntitlementState] = [:]  // environment/bundle/originalTransactionId → state
        var runs: [(topic: String, group: String, workers: [Process])] = []
        for (environmentName, vectors) in byEnvironment.sorted(by: { $0.key < $1.key }) {
            guard let environment = Environment(rawValue: environmentName) else {
                Issue.record("unknown environment \(environmentName)")
                continue
            }
            let apps = "com.example.steering.app:1234567890@\(environmentName)"
            let verifier = try SignedPayloadVerifier(configuration: .init(
                apps: [AppIdentity(bundleId: "com.example.steering.app", appAppleId: 1_234_567_890, environments: [environment])],
                trustedRoots: [[UInt8](try Data(contentsOf: URL(fileURLWithPath: rootFile)))]))
            let topic = TestServices.uniqueName("vectors-\(environmentName.lowercased())")
            try await fixture.createTopics(partitions: 3, topic: topic)

            // Through the real ingest: a body it refuses never reaches the topic (and must be a reject).
            let ingest = try await RunningIngest.start(bootstrap: bootstrap, topic: topic)
            let connection = HTTPTestConnection(port: ingest.port)
            for vector in vectors {
                let status = try await connection.send(path: "/v2/notifications", headers: jsonHeaders, body: vector.body).status
                guard status == 200 else {
                    #expect(!vector.accept && (400..<500).contains(status), "\(vector.name): ingest answered \(status)")
                    continue
                }
                let payload = try ResponseBodyV2.parse(body: vector.body).signedPayload
                let result: Result<VerifiedNotification, VerificationError>
                do throws(VerificationError) {
                    result = .success(try await verifier.verifyNotification(payload))
                } catch {
                    result = .failure(error)
                }
                switch result {
                case .success(let verified):
                    #expect(vector.accept, "\(vector.name) is labelled reject but the library accepts it")
                    expectedStored[try #require(verified.payload.notificationUUID)] = vector
                    if case .updated(let state) = EntitlementTransition.apply(verified, to: expectedEntitlements[Self.key(verified)]) {
                        expectedEntitlements[Self.key(verified)] = state
                    }
                case .failure(let error):
                    #expect(!vector.accept, "\(vector.name) is labelled accept but the library refuses it: \(error)")
                    expectedDead[payload] = (error.code, vector.name)
                }
            }
            try await ingest.stop()
            let group = TestServices.uniqueName("vectors")
            var workers: [Process] = []
            for _ in 0..<2 {
                workers.append(try await fixture.startWorker(group: group, postgresURL: database, apps: apps, trustedRoots: rootFile, topic: topic).process)
            }
            runs.append((topic, group, workers))
        }
        for run in runs {
            #expect(try await fixture.waitForLag(group: run.group, topic: run.topic), "\(run.topic) consumed to the end\n\(fixture.logTail())")
            for worker in run.workers { await ChildProcess.terminate(worker) }
        }

        // Rejects: exactly the expected payloads, each with the library's error code, reason and provenance.
        var dead: [String: String] = [:]
        for run in runs {
            for letter in try await fixture.deadLetters(group: run.group, topic: run.topic) {
                let payload = String(decoding: letter.record.value, as: UTF8.self)
                #expect(dead[payload] == nil, "dead-lettered twice: \(expectedDead[payload]?.vector ?? "?")")
                dead[payload] = letter.errorCode
                #expect(!letter.errorReason.isEmpty && letter.record.headers.string(DeadLetterHeader.originalTopic) == run.topic)
            }
        }
        #expect(dead.count == expectedDead.count, "dead letters: \(dead.count), expected \(expectedDead.count)")
        for (payload, expected) in expectedDead {
            #expect(dead[payload] == expected.code, "\(expected.vector): dead-lettered as \(dead[payload] ?? "nothing"), the library says \(expected.code)")
        }

        // Accepts: the archive holds exactly them, each payload as decoded; their transactions as decoded; the
        // entitlements exactly what the state machine makes of them.
        let rows = try await TestDatabase.with(database) { client in
            var notifications: [String: String] = [:]
            for try await (uuid, payload) in try await client.query("SELECT notification_uuid, payload::text FROM notifications", logger: ingestTestLogger).decode((String, String).self) {
                notifications[uuid] = payload
            }
            var transactions: [String: String] = [:]
            for try await (id, payload) in try await client.query("SELECT transaction_id, payload::text FROM transactions", logger: ingestTestLogger).decode((String, String).self) {
                transactions[id] = payload
            }
            var entitlements: [String: String] = [:]
            for try await (environment, bundle, original, state) in try await client.query(
                "SELECT environment, bundle_id, original_transaction_id, state::text FROM entitlements", logger: ingestTestLogger
            ).decode((String, String, String, String).self) {
                entitlements["\(environment)/\(bundle)/\(original)"] = state
            }
            return (notifications, transactions, entitlements)
        }
        #expect(Set(rows.0.keys) == Set(expectedStored.keys), "stored \(rows.0.count) notifications, expected \(expectedStored.count)")
        var expectedTransactions: [String: Any] = [:]
        for (uuid, vector) in expectedStored {
            let decoded = try #require(vector.object["decoded"] as? [String: Any])
            if let stored = rows.0[uuid] {
                #expect(Self.sameJSON(stored, decoded["payload"]), "\(vector.name): the archived payload differs from the decoded content")
            }
            if let transaction = decoded["transactionInfo"] as? [String: Any], let id = transaction["transactionId"] as? String {
                expectedTransactions[id] = transaction
            }
        }
        #expect(Set(rows.1.keys) == Set(expectedTransactions.keys), "transactions \(rows.1.count), expected \(expectedTransactions.count)")
        for (id, transaction) in expectedTransactions {
            #expect(rows.1[id].map { Self.sameJSON($0, transaction) } == true, "transaction \(id) differs from the decoded content")
        }
        #expect(!expectedEntitlements.isEmpty)
        #expect(Set(rows.2.keys) == Set(expectedEntitlements.keys), "entitlements \(rows.2.keys.sorted()) vs \(expectedEntitlements.keys.sorted())")
        for (key, expected) in expectedEntitlements {
            let stored = try rows.2[key].map { try JSONDecoder().decode(EntitlementState.self, from: Data($0.utf8)) }
            #expect(stored == expected, "entitlement \(key)")
        }
    }

    static func key(_ notification: VerifiedNotification) -> String {
        "\(notification.environment.rawValue)/\(notification.bundleId)/\(notification.transactionInfo?.model.originalTransactionId ?? "")"
    }

    /// JSON equality independent of key order and number spelling (jsonb normalizes both).
    static func sameJSON(_ text: String, _ object: Any?) -> Bool {
        guard let object, let parsed = try? JSONSerialization.jsonObject(with: Data(text.utf8)) else { return false }
        return (parsed as? NSObject)?.isEqual(object) ?? false
    }
}
