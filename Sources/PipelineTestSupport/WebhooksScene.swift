import AppStoreNotifications
import EntitlementEvents
import Foundation
import KafkaClient
import PipelineOperations
import TestSupport
import Testing

/// A worker (with its events relay), `webhooks` processes and a receiver on loopback, over one database and topic.
package final class WebhooksScene: @unchecked Sendable {
    package let scene: BackfillScene
    package let receiver: WebhookReceiver
    package var receiverPort = 0
    package var webhooks: [Process] = []
    package var opsPorts: [Int] = []
    package let group = TestServices.uniqueName("webhooks")
    package var fixture: WorkerProcessFixture { scene.fixture }
    package let binary = repositoryRoot.appendingPathComponent(".build/debug/webhooks").path

    package init(bootstrap: String, postgresURL: String, slowSeconds: Int = 3, workerEnvironment: [String: String] = [:]) async throws {
        scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, workerEnvironment: workerEnvironment)
        // The worker migrates as it starts, but its ops port listens before that ends: without this, a pipelinectl
        // call right away raced the migration (a fresh-clone run under load failed "the database lacks migrations").
        let migrated = try await scene.run(["migrate"])
        #expect(migrated.status == 0, "\(migrated.output)")
        receiver = WebhookReceiver(slowSeconds: slowSeconds)
        receiverPort = try await receiver.start()
    }

    package var toolEnvironment: [String: String] { ["EVENTS_TOPIC": fixture.eventsTopic(), "WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true"] }

    /// `pipelinectl webhooks add` of `path` on the receiver; returns (id, secret).
    package func add(_ path: String, _ options: [String] = []) async throws -> (id: String, secret: String) {
        let added = try await scene.run(["webhooks", "add", "--url", "http://127.0.0.1:\(receiverPort)\(path)", "--allow-http", "--json"] + options, extra: toolEnvironment)
        #expect(added.status == 0, "\(added.output)")
        let json = try StrictJSONParser().parseObject(Array((added.output.split(separator: "\n").last.map(String.init) ?? "").utf8))
        return (try #require(json["id"]?.stringValue), try #require(json["secret"]?.stringValue))
    }

    package func startWebhooks(extra: [String: String] = [:]) async throws {
        let port = TestServices.freePort()
        let process = try await ChildProcess.start(binary: binary, environment: [
            "KAFKA_BOOTSTRAP_SERVERS": fixture.bootstrap, "EVENTS_TOPIC": fixture.eventsTopic(), "POSTGRES_URL": scene.database, "WEBHOOKS_GROUP_ID": group,
            "WEBHOOKS_OPS_HOST": "127.0.0.1", "WEBHOOKS_OPS_PORT": String(port), "WEBHOOKS_ALLOW_PRIVATE_TARGETS": "true", "WEBHOOK_TIMEOUT_MS": "1000",
            "WEBHOOK_RETRY_SCHEDULE": Array(repeating: "1s", count: 120).joined(separator: ","), "WEBHOOKS_POLL_INTERVAL_MS": "50", "WEBHOOKS_CONCURRENCY": "32",
            "KAFKA_CLIENT_ID": "\(group)-\(webhooks.count)", "KAFKA_CONFIG_SESSION_TIMEOUT_MS": "3000", "KAFKA_CONFIG_HEARTBEAT_INTERVAL_MS": "300",
            "KAFKA_CONFIG_AUTO_COMMIT_INTERVAL_MS": "200",
        ].merging(extra) { _, new in new }, logFile: fixture.directory + "/webhooks-\(webhooks.count).log", listeningOn: port)
        #expect(process.isRunning, "webhooks did not start: \(fixture.logTail())")
        webhooks.append(process)
        opsPorts.append(port)
    }

    /// The events topic as a plain consumer reads it, per subject in topic order (ids), and every event by id.
    package func topicEvents(atLeast count: Int) async throws -> (bySubject: [String: [String]], byId: [String: JSONObject]) {
        let deadline = ContinuousClock.now + .seconds(90)
        var bySubject: [String: [String]] = [:], byId: [String: JSONObject] = [:]
        repeat {
            bySubject = [:]
            byId = [:]
            for record in try await TopicReader.readAll(fixture.eventsTopic(), client: KafkaClientConfiguration(bootstrapServers: [fixture.bootstrap]), logger: ingestTestLogger) {
                guard let event = CloudEventRecord.structured(record), let id = event["id"]?.stringValue, byId[id] == nil else { continue }
                byId[id] = event
                bySubject[event["subject"]?.stringValue ?? "", default: []].append(id)
            }
            if byId.count >= count { break }
            try await Task.sleep(for: .milliseconds(300))
        } while ContinuousClock.now < deadline
        return (bySubject, byId)
    }

    /// Waits until `path` has received (answered 2xx) every id of `ids`.
    package func waitDelivered(_ ids: Set<String>, path: String, timeout: Duration = .seconds(90)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if ids.isSubset(of: Set(receiver.deliveries.filter { $0.path == path && $0.status == 200 }.map(\.id))) { return true }
            try await Task.sleep(for: .milliseconds(200))
        }
        return false
    }

    /// Per subject, the ids `path` received with 200, first arrival of each id only (deduplicated by webhook-id).
    package func receivedOrder(_ path: String) -> [String: [String]] {
        var seen: Set<String> = []
        var order: [String: [String]] = [:]
        for delivery in receiver.deliveries where delivery.path == path && delivery.status == 200 && seen.insert(delivery.id).inserted {
            order[delivery.subject, default: []].append(delivery.id)
        }
        return order
    }

    /// Once the workers have caught up: the topic's events, at least as many as the outbox holds.
    package func caughtUpTopicEvents(sourceLocation: SourceLocation = #_sourceLocation) async throws -> (bySubject: [String: [String]], byId: [String: JSONObject]) {
        #expect(try await fixture.waitForLag(group: scene.group), sourceLocation: sourceLocation)
        return try await topicEvents(atLeast: try await outboxCount())
    }

    /// Rows in the outbox: every event the workers wrote (none is pruned within a test).
    package func outboxCount() async throws -> Int {
        try await scene.query("SELECT count(*)::int FROM entitlement_events_outbox", as: Int.self).first ?? 0
    }

    /// Once the workers have caught up: every event of the outbox is on the topic, `path` received each (within
    /// `timeout`), and in each subject's topic order. Returns the topic's events for further checks.
    @discardableResult
    package func expectEveryEventDeliveredInOrder(
        to path: String, timeout: Duration = .seconds(90), sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (bySubject: [String: [String]], byId: [String: JSONObject]) {
        let topic = try await caughtUpTopicEvents(sourceLocation: sourceLocation)
        #expect(try await waitDelivered(Set(topic.byId.keys), path: path, timeout: timeout), "\(path) starved: \(fixture.logTail())", sourceLocation: sourceLocation)
        let received = receivedOrder(path)
        for (subject, ids) in topic.bySubject {
            #expect(received[subject] == ids, "\(subject): \(received[subject] ?? []) vs \(ids)", sourceLocation: sourceLocation)
        }
        return topic
    }

    package func finish() async {
        for process in webhooks { await ChildProcess.terminate(process) }
        await receiver.stop()
        await scene.finish()
    }
}

