import AppStoreNotifications
import EntitlementEvents
import Foundation
import KafkaClient
import PipelineOperations
import PipelineTestSupport
import ServiceRuntime
import TestSupport
import Testing
import TestGates

/// The OTLP/HTTP receiver of the tests (scripts/otlp_receiver.py, protobuf parsed by opentelemetry-proto): a real
/// process on loopback that writes every span it receives to a JSON-lines file.
final class SpanReceiver: @unchecked Sendable {
    let process = Process()
    let file: String
    let port: Int

    init(directory: String) throws {
        file = directory + "/spans-\(UUID().uuidString.prefix(8)).jsonl"
        process.executableURL = repositoryRoot.appendingPathComponent(".venv/bin/python3")
        process.arguments = [repositoryRoot.appendingPathComponent("scripts/otlp_receiver.py").path, "--out", file]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        var line: [UInt8] = []
        while let byte = try output.fileHandleForReading.read(upToCount: 1)?.first, byte != 10 { line.append(byte) }
        port = Int(String(decoding: line, as: UTF8.self)) ?? 0
    }

    /// What a service needs to export here: the standard variables only, a short batch delay so the test waits less.
    var environment: [String: String] { ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(port)", "OTEL_BSP_SCHEDULE_DELAY": "200"] }

    struct Span {
        var traceId, spanId, parentSpanId, name, kind, service: String
        var attributes: [String: JSONValue]
        var links: [(traceId: String, spanId: String)]
        var raw: String
    }

    var spans: [Span] {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line -> Span? in
            guard let object = try? StrictJSONParser().parseObject(Array(line.utf8)) else { return nil }
            func text(_ key: String) -> String { object[key]?.stringValue ?? "" }
            let links = object["links"]?.arrayValue?.compactMap { link -> (String, String)? in
                guard let trace = link.objectValue?["traceId"]?.stringValue, let span = link.objectValue?["spanId"]?.stringValue else { return nil }
                return (trace, span)
            } ?? []
            var attributes: [String: JSONValue] = [:]
            for member in object["attributes"]?.objectValue?.members ?? [] { attributes[member.key] = member.value }
            return Span(
                traceId: text("traceId"), spanId: text("spanId"), parentSpanId: text("parentSpanId"), name: text("name"), kind: text("kind"),
                service: text("service"), attributes: attributes, links: links, raw: String(line))
        }
    }

    func stop() async { await ChildProcess.terminate(process) }
}

@Suite("Tracing: one trace per notification from ingest to the webhook receiver, over OTLP/HTTP", .serialized, .requiresKafkaAndPostgres)
struct TracingProcessTests: ProcessSuite {
    @Test("each notification is one trace (ingest → worker → relay → webhook → the receiver's traceparent); batches link their records; dead letters and a re-drive keep the trace; no payload or secret in a span; a receiver that is gone loses spans, never notifications")
    func oneTracePerNotification() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tracing-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let spans = try SpanReceiver(directory: directory)
        #expect(spans.port > 0)
        let scene = try await WebhooksScene(bootstrap: bootstrap, postgresURL: postgresURL, workerEnvironment: spans.environment)
        let ingest = try scene.scene.startIngestProcess(environment: spans.environment)
        let hook = try await scene.add("/hook/traced")
        // An endpoint whose URL carries a secret in its query: it must never reach a span (issue 51).
        let urlToken = "tok-" + UUID().uuidString.prefix(12).lowercased()
        _ = try await scene.add("/hook/token?token=\(urlToken)")
        try await scene.startWebhooks(extra: spans.environment)

        let minter = scene.fixture.minter
        var events = NotificationMinter.lifecycleEvents(subscriptions: 4, firstSubscription: 8_200)
        for event in events { #expect(await scene.scene.deliver(minter.signedNotification(event)) == .success) }
        // Forged: a chain no configured root trusts; dead-lettered in a trace of its own.
        let forger = NotificationMinter(chain: try TestCertificateAuthority().issueChain())
        var forged = events[0]
        forged.notificationUUID = UUID().uuidString.lowercased()
        #expect(await scene.scene.deliver(forger.signedNotification(forged)) == .success)
        // A caller that brings its own trace context (sampled) and an oversized tracestate: ingest starts the
        // notification's trace itself, keeps the caller's context as a link only, and drops the tracestate.
        var chosen = NotificationMinter.lifecycleEvents(subscriptions: 1, firstSubscription: 8_250)[0]
        chosen.notificationUUID = UUID().uuidString.lowercased()
        let callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
        let callerState = "vendor=" + String(repeating: "x", count: 4_000)
        let posted = try await HTTPTestConnection(port: try #require(scene.scene.ingestProcessPort)).send(
            path: "/v2/notifications",
            headers: ["Content-Type": "application/json", "traceparent": "00-\(callerTrace)-00f067aa0ba902b7-01", "tracestate": callerState],
            body: Array(NotificationMinter.body(minter.signedNotification(chosen)).utf8))
        #expect(posted.status == 200, "\(posted.bodyText)")
        events.append(chosen)

        #expect(try await TestDatabase.waitForLedger(scene.scene.database, count: events.count), "\(scene.fixture.logTail())")
        #expect(try await scene.fixture.waitForLag(group: scene.scene.group))
        let expectedCount = try await scene.outboxCount()
        let topic = try await scene.topicEvents(atLeast: expectedCount)
        #expect(try await scene.waitDelivered(Set(topic.byId.keys), path: "/hook/traced"), "\(scene.fixture.logTail())")

        // Every hop's spans arrive (each exporter batches for 200 ms).
        func spansNow(until done: ([SpanReceiver.Span]) -> Bool) async throws -> [SpanReceiver.Span] {
            for _ in 0..<100 {
                let now = spans.spans
                if done(now) { return now }
                try await Task.sleep(for: .milliseconds(200))
            }
            return spans.spans
        }
        let uuids = Set(events.map(\.notificationUUID))
        let all = try await spansNow { now in
            let processed = Set(now.compactMap { $0.attributes["appstore.notification.uuid"]?.stringValue })
            return uuids.isSubset(of: processed) && now.filter { $0.service == "webhooks" && $0.name == "webhook attempt" }.count >= topic.byId.count
        }
        let byId = Dictionary(all.map { ($0.spanId, $0) }, uniquingKeysWith: { first, _ in first })

        // Per notification: the worker's record span is the child of ingest's send span, itself the child of ingest's
        // server span; it marks the end of its verification and lasts until the transaction that wrote it committed.
        var traceOf: [String: String] = [:]
        for uuid in uuids {
            let record = try #require(all.first { $0.service == "worker" && $0.kind == "consumer" && $0.attributes["appstore.notification.uuid"]?.stringValue == uuid })
            let send = try #require(byId[record.parentSpanId], "\(uuid): the worker's span has no parent among the spans")
            #expect(send.service == "ingest" && send.kind == "producer" && send.traceId == record.traceId)
            let server = try #require(byId[send.parentSpanId])
            #expect(server.service == "ingest" && server.kind == "server" && server.parentSpanId.isEmpty, "ingest's server span starts the trace")
            #expect(record.raw.contains("\"events\": [\"verified\"]"), "the record's span marks the end of its verification: \(record.raw.prefix(400))")
            #expect(record.attributes["db.system.name"] == .string("postgresql"), "the record's span covers the transaction that wrote it")
            #expect(["applied", "unchanged"].contains(record.attributes["appstore.notification.outcome"]?.stringValue ?? ""), "\(record.raw)")
            #expect(record.attributes["messaging.kafka.offset"] != nil && record.attributes["messaging.destination.partition.id"] != nil)
            traceOf[uuid] = record.traceId
        }
        #expect(Set(traceOf.values).count == uuids.count, "one trace per notification")

        // The batch span (a trace of its own) links to each record's context: ingest's send spans.
        let sends = all.filter { $0.service == "ingest" && $0.kind == "producer" }
        let linked = Set(all.filter { $0.service == "worker" && $0.attributes["messaging.batch.message_count"] != nil }.flatMap { $0.links.map(\.spanId) })
        #expect(!sends.isEmpty && sends.allSatisfy { linked.contains($0.spanId) }, "every record is linked from its batch span")
        let batches = Set(all.filter { $0.service == "worker" && $0.attributes["messaging.batch.message_count"] != nil }.map(\.spanId))
        #expect(all.contains { batches.contains($0.parentSpanId) && $0.attributes["db.system.name"] == .string("postgresql") }, "the batch's transaction span")

        // Events: `ce_traceparent` names the notification's trace; the relay's send span is a child of the record's.
        for record in try await TopicReader.readAll(scene.fixture.eventsTopic(), client: KafkaClientConfiguration(bootstrapServers: [scene.fixture.bootstrap]), logger: ingestTestLogger) {
            guard let event = CloudEventRecord.structured(record), let cause = event["data"]?.objectValue?["cause"]?.objectValue?["notificationUUID"]?.stringValue
            else { continue }
            let ceTrace = record.headers.string(CloudEventsHeader.traceparent).flatMap(TraceParent.traceId)
            #expect(ceTrace != nil && ceTrace == traceOf[cause], "\(cause): ce_traceparent \(record.headers.string(CloudEventsHeader.traceparent) ?? "none")")
            let hop = record.headers.string(TraceParent.header).flatMap(TraceParent.traceId)
            #expect(hop == traceOf[cause], "the record's own traceparent is in the same trace")
        }
        // Webhooks: each attempt is a span under the relay's send span; its POST a client span under it, whose
        // traceparent the receiver got.
        for delivery in scene.receiver.deliveries where delivery.path == "/hook/traced" {
            let parts = (delivery.traceparent ?? "").split(separator: "-").map(String.init)
            #expect(parts.count == 4, "a delivery without traceparent: \(delivery.id)")
            guard parts.count == 4, let post = byId[parts[2]] else {
                Issue.record("no span for the receiver's traceparent \(delivery.traceparent ?? "")")
                continue
            }
            #expect(post.service == "webhooks" && post.kind == "client" && post.traceId == parts[1])
            let attempt = try #require(byId[post.parentSpanId])
            #expect(attempt.name == "webhook attempt" && attempt.attributes["webhook.id"]?.stringValue == delivery.id)
            let relaySend = try #require(byId[attempt.parentSpanId])
            #expect(relaySend.service == "worker" && relaySend.kind == "producer")
            let cause = delivery.json?["data"]?.objectValue?["cause"]?.objectValue?["notificationUUID"]?.stringValue ?? ""
            #expect(parts[1] == traceOf[cause], "\(delivery.id): the webhook's trace is the notification's")
        }
        // Where people look: the delivery, archive and attempt rows keep the trace id.
        let archived = try await scene.scene.query("SELECT notification_uuid || ' ' || coalesce(trace_id, '-') FROM notification_archive", as: String.self)
        for row in archived {
            let parts = row.split(separator: " ").map(String.init)
            #expect(traceOf[parts[0]] == parts[1], "archive row \(row)")
        }
        let attemptTraces = try await scene.scene.query("SELECT count(*)::int FROM webhook_attempts WHERE trace_id IS NULL", as: Int.self).first
        #expect(attemptTraces == 0, "every attempt keeps its trace id")

        // The forged notification: dead-lettered in its ingest trace, the dead letter carrying the context; a re-drive
        // continues it (dead-lettered again, in the same trace).
        let forgedSpan = try #require(all.first { $0.attributes["appstore.notification.uuid"]?.stringValue == forged.notificationUUID })
        #expect(forgedSpan.attributes["appstore.notification.outcome"] == .string("dead-lettered"))
        #expect(byId[forgedSpan.parentSpanId]?.service == "ingest")
        let deadTrace = try await scene.scene.query("SELECT coalesce(trace_id, '-') FROM dead_lettered_records", as: String.self)
        #expect(deadTrace == [forgedSpan.traceId])
        let letters = try await TopicReader.readAll(
            scene.fixture.topic + ".dead-letter", client: KafkaClientConfiguration(bootstrapServers: [scene.fixture.bootstrap]), logger: ingestTestLogger)
        #expect(letters.map { $0.headers.string(TraceParent.header).flatMap(TraceParent.traceId) } == [forgedSpan.traceId])
        let redrive = try await scene.scene.run(["dlq", "redrive"], extra: spans.environment)
        #expect(redrive.status == 0, "\(redrive.output)")
        let redriven = try await spansNow { now in
            now.filter { $0.service == "worker" && $0.attributes["appstore.notification.uuid"]?.stringValue == forged.notificationUUID }.count >= 2
        }.filter { $0.service == "worker" && $0.attributes["appstore.notification.uuid"]?.stringValue == forged.notificationUUID }
        #expect(redriven.count >= 2 && redriven.allSatisfy { $0.traceId == forgedSpan.traceId }, "the re-drive continues the dead letter's trace")

        // A pipelinectl command is a trace of its own, and what it sends is handled in it: reconcile one subscription
        // with "Apple" (the fake App Store Server API), whose status snapshot the worker applies in the command's trace.
        let reconciled = try #require(events.last)
        scene.scene.apple.fake.setSubscription(FakeAppStoreServerAPI.Subscription(
            originalTransactionId: reconciled.originalTransactionId, subscriptionGroupIdentifier: "21000001", status: reconciled.status,
            signedTransactionInfo: minter.chain.sign(minter.transaction(reconciled)), signedRenewalInfo: minter.chain.sign(minter.renewalInfo(reconciled)),
            history: []))
        let reconcile = try await scene.scene.run(
            ["reconcile", "--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production", "--transaction-id", reconciled.originalTransactionId],
            extra: spans.environment)
        #expect(reconcile.status == 0, "\(reconcile.output)")
        let afterReconcile = try await spansNow { now in
            guard let command = now.first(where: { $0.service == "pipelinectl" && $0.name == "pipelinectl reconcile" }) else { return false }
            return now.contains { $0.service == "worker" && $0.parentSpanId == command.spanId }
        }
        let command = try #require(afterReconcile.first { $0.service == "pipelinectl" && $0.name == "pipelinectl reconcile" })
        #expect(command.parentSpanId.isEmpty, "the command starts its trace")
        let snapshot = afterReconcile.first { $0.service == "worker" && $0.parentSpanId == command.spanId }
        #expect(snapshot?.traceId == command.traceId, "the worker applies the command's snapshot in the command's trace")
        #expect(afterReconcile.contains { $0.service == "pipelinectl" && $0.kind == "client" && $0.parentSpanId == command.spanId },
            "the call to the App Store Server API is the command's client span")

        // No attribute carries a signed payload or a secret.
        for span in spans.spans {
            #expect(!span.raw.contains("eyJ") && !span.raw.contains(hook.secret), "a span carries a payload or a secret: \(span.raw.prefix(300))")
        }
        // No span carries a customer's identifier (subscription, transaction, token), the webhook URL's query or the
        // caller's tracestate; server spans name the route template, client spans the host and template, no query.
        let identifiers = Set(events.flatMap { [$0.originalTransactionId, $0.transactionId, $0.appAccountToken] }) .union([urlToken, "vendor=xxxx"])
        for span in spans.spans {
            let leaked = identifiers.filter { span.raw.contains($0) }
            #expect(leaked.isEmpty, "span \(span.name) (\(span.service)) carries \(leaked): \(span.raw.prefix(400))")
            for attribute in ["url.full", "url.path", "url.query", "http.target"] {
                #expect(span.attributes[attribute] == nil, "span \(span.name) (\(span.service)) records \(attribute)")
            }
        }
        let servers = spans.spans.filter { $0.kind == "server" && $0.service == "ingest" }
        #expect(!servers.isEmpty && servers.allSatisfy { $0.attributes["http.route"] == .string("/v2/notifications") && $0.name == "POST /v2/notifications" })
        #expect(servers.allSatisfy { $0.traceId != callerTrace && $0.parentSpanId.isEmpty }, "the caller's traceparent does not choose the trace")
        #expect(servers.contains { $0.links.contains { $0.traceId == callerTrace } }, "the caller's context is kept as a link")
        let clients = spans.spans.filter { $0.kind == "client" && $0.service == "pipelinectl" }
        #expect(clients.contains { $0.attributes["url.template"] == .string("/inApps/v1/subscriptions/{transactionId}") && $0.attributes["server.address"] != nil },
            "the App Store Server API call is named by its template: \(clients.map(\.name))")

        // The receiver goes away: spans are lost (counted), notifications are not.
        await spans.stop()
        let later = NotificationMinter.lifecycleEvents(subscriptions: 2, firstSubscription: 8_300)
        for event in later { #expect(await scene.scene.deliver(minter.signedNotification(event)) == .success) }
        #expect(try await TestDatabase.waitForLedger(scene.scene.database, count: events.count + later.count), "\(scene.fixture.logTail())")
        let outbox = try await scene.outboxCount()
        let laterTopic = try await scene.topicEvents(atLeast: outbox)
        #expect(try await scene.waitDelivered(Set(laterTopic.byId.keys), path: "/hook/traced"), "\(scene.fixture.logTail())")
        var dropped = false
        for _ in 0..<150 where !dropped {
            let metrics = try await HTTPTestConnection(port: scene.scene.opsPorts[0]).send(method: "GET", path: "/metrics")
            dropped = metrics.bodyText.split(separator: "\n").contains { $0.hasPrefix("tracing_spans_dropped_total{reason=\"export_failed\"}") && !$0.hasSuffix(" 0") }
            if !dropped { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(dropped, "the worker counts the spans it could not export")

        await ChildProcess.terminate(ingest)
        await scene.finish()
        // TRACING_SPANS_COPY=file keeps what the receiver got (docs/tracing.md's picture: scripts/trace_picture.py).
        if let copy = ProcessInfo.processInfo.environment["TRACING_SPANS_COPY"] {
            try? FileManager.default.removeItem(atPath: copy)
            try? FileManager.default.copyItem(atPath: spans.file, toPath: copy)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }
}
