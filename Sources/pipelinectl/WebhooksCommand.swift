import AppStoreNotifications
import ArgumentParser
import Foundation
import PipelineConfiguration
import PipelineOperations
import Webhooks

/// `pipelinectl webhooks …`: the endpoints the webhooks service delivers entitlement events to.
struct WebhooksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhooks", abstract: "Manage webhook endpoints, look at their deliveries, replay and test them (docs/webhooks.md).",
        subcommands: [Add.self, List.self, Disable.self, Enable.self, RotateSecret.self, Remove.self, Replay.self, Test.self, Deliveries.self])

    /// The settings these commands share with the webhooks service.
    static func settings() throws -> (allowPrivate: Bool, overlap: Duration, timeout: Duration) {
        let settings = try WebhooksConfiguration.toolSettings(EnvironmentReader())
        return (settings.allowPrivateTargets, settings.secretRotationOverlap, settings.timeout)
    }

    static func withWebhookStore<T: Sendable>(_ connection: ConnectionOptions, _ body: @Sendable (WebhookStore) async throws -> T) async throws -> T {
        try await connection.withMigratedStore { store in
            return try await body(WebhookStore(client: store.client, logger: toolLogger, erasureKey: store.erasureKey))
        }
    }

    /// One change to endpoint `id`: `change` answers whether the endpoint exists; then `<done> <id>` is printed.
    static func changeEndpoint(_ connection: ConnectionOptions, _ id: String, done: String?, _ change: @Sendable (WebhookStore) async throws -> Bool) async throws {
        guard try await withWebhookStore(connection, change) else { throw ToolFailure("no webhook endpoint \(UntrustedText.quoted(id, limit: 60))") }
        if let done { print("\(done) \(id)") }
    }

    static func endpoint(_ id: String, in store: WebhookStore) async throws -> WebhookEndpoint {
        guard let endpoint = try await store.endpoint(id: id) else { throw ToolFailure("no webhook endpoint \(UntrustedText.quoted(id, limit: 60))") }
        return endpoint
    }

    static func json(_ endpoint: WebhookEndpoint) -> JSONValue {
        .object(JSONObject([
            "id": .string(endpoint.id), "url": .string(endpoint.url), "description": jsonValue(endpoint.description),
            "bundleIds": .array(endpoint.bundleIds.map { .string($0) }), "environment": jsonValue(endpoint.environment),
            "types": .array(endpoint.eventTypes.map { .string($0) }), "allowHttp": .bool(endpoint.allowHTTP), "enabled": .bool(endpoint.enabled),
            "disabledReason": jsonValue(endpoint.disabledReason), "previousSecretUntil": jsonValue(endpoint.previousSecretUntil),
            "createdAt": jsonValue(endpoint.createdAt),
        ]))
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add", abstract: "Register an endpoint and print its signing secret once (whsec_…): give it to the receiver now.")

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The https URL to POST events to.") var url: String
        @Option(help: "Only events of this bundle id (repeatable); none: every app.") var bundleId: [String] = []
        @Option(help: "Only Production or Sandbox events; none: both.") var environment: String?
        @Option(help: "Only events of this type, e.g. entitlement.revoked (repeatable); none: every type.") var type: [String] = []
        @Option(help: "A note for people.") var description: String?
        @Flag(help: "Accept a plain http URL (tests, local compose): the one way to register one.") var allowHttp = false
        @Flag(help: "Print {\"id\", \"url\", \"secret\", …} as JSON.") var json = false

        func validate() throws {
            if let environment, !["Production", "Sandbox"].contains(environment) {
                throw ValidationError("--environment must be Production or Sandbox, not \(UntrustedText.quoted(environment))")
            }
            let known = Set(EntitlementEventType.allCases.map(\.rawValue))
            if let unknown = type.first(where: { !known.contains($0) }) {
                throw ValidationError("--type \(UntrustedText.quoted(unknown)) is not an event type (\(known.sorted().joined(separator: ", ")))")
            }
        }

        func run() async throws {
            let settings = try WebhooksCommand.settings()
            let target: WebhookTarget
            do {
                target = try WebhookTarget.parse(url, allowHTTP: allowHttp)
                _ = try await target.checkAddresses(allowPrivate: settings.allowPrivate)
            } catch {
                throw ValidationError("--url refused: \(error.reason)")
            }
            let endpoint = WebhookEndpoint(
                id: "we_" + Hex.encode((0..<6).map { _ in UInt8.random(in: 0...255) }), url: target.url.absoluteString, description: description,
                bundleIds: bundleId, environment: environment, eventTypes: type, allowHTTP: allowHttp, secret: WebhookSignature.generateSecret())
            try await WebhooksCommand.withWebhookStore(connection) { store in try await store.addEndpoint(endpoint) }
            guard case .object(var object) = WebhooksCommand.json(endpoint) else { return }
            object["secret"] = .string(endpoint.secret)
            printCreated(json: json, object, summary: "added \(endpoint.id) → \(endpoint.url)", secret: ("signing secret", endpoint.secret))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the endpoints (never their secrets).")
        @OptionGroup var connection: ConnectionOptions
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let endpoints = try await WebhooksCommand.withWebhookStore(connection) { store in try await store.endpoints() }
            if json {
                printJSON(.array(endpoints.map(WebhooksCommand.json)))
                return
            }
            print("ID               STATE     URL / FILTERS")
            for endpoint in endpoints {
                let state = endpoint.enabled ? "enabled " : "disabled"
                let filters = [
                    endpoint.bundleIds.isEmpty ? nil : "apps " + endpoint.bundleIds.joined(separator: ","), endpoint.environment,
                    endpoint.eventTypes.isEmpty ? nil : "types " + endpoint.eventTypes.joined(separator: ","),
                ].compactMap { $0 }
                print("\(endpoint.id)  \(state)  \(UntrustedText.escaped(endpoint.url, limit: 120))\(filters.isEmpty ? "" : "  (" + filters.joined(separator: "; ") + ")")")
                if let reason = endpoint.disabledReason { print("                           reason: \(UntrustedText.escaped(reason, limit: 200))") }
            }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "disable", abstract: "Stop delivering to an endpoint (its deliveries wait).")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The endpoint id.") var endpoint: String
        @Option(help: "Why (shown by list).") var reason = "disabled by an operator"

        func run() async throws {
            try await WebhooksCommand.changeEndpoint(connection, endpoint, done: "disabled") { [endpoint, reason] in
                try await $0.setEnabled(id: endpoint, enabled: false, reason: reason)
            }
        }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "enable", abstract: "Deliver to an endpoint again, from its oldest waiting delivery.")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The endpoint id.") var endpoint: String

        func run() async throws {
            try await WebhooksCommand.changeEndpoint(connection, endpoint, done: "enabled") { [endpoint] in try await $0.setEnabled(id: endpoint, enabled: true, reason: nil) }
        }
    }

    struct RotateSecret: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-secret",
            abstract: "A new signing secret, printed once; the old one keeps signing too for WEBHOOK_SECRET_ROTATION_OVERLAP (24h).")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The endpoint id.") var endpoint: String
        @Flag(help: "Print {\"id\", \"secret\", \"previousSecretUntil\"} as JSON.") var json = false

        func run() async throws {
            let overlap = try WebhooksCommand.settings().overlap
            let secret = WebhookSignature.generateSecret()
            let until = Date().addingTimeInterval(Double(overlap.components.seconds))
            try await WebhooksCommand.changeEndpoint(connection, endpoint, done: nil) { [endpoint] in
                try await $0.rotateSecret(id: endpoint, newSecret: secret, overlapUntil: until)
            }
            if json {
                printJSON(.object(JSONObject(["id": .string(endpoint), "secret": .string(secret), "previousSecretUntil": jsonValue(until)])))
            } else {
                print("new signing secret of \(endpoint) (shown once): \(secret)")
                print("the previous secret signs too until \(until.formatted(.iso8601))")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove an endpoint with its deliveries and their log.")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The endpoint id.") var endpoint: String

        func run() async throws {
            try await WebhooksCommand.changeEndpoint(connection, endpoint, done: "removed") { [endpoint] in try await $0.removeEndpoint(id: endpoint) }
        }
    }

    struct Replay: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "replay",
            abstract: "Deliver events again to an endpoint, in order, with their ids, whatever their earlier outcome.",
            discussion: """
                Reads the events topic (its retention bounds how far back): --event-id picks events by id (any type);
                --since/--until pick by the CloudEvents time, RFC 3339 (2026-01-02T03:04:05Z) or relative (3d, 12h),
                among the events the endpoint's filters want. The webhooks service delivers them.
                """)
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The endpoint id.") var endpoint: String
        @Option(help: "An event id (ce_id, webhook-id) to deliver again (repeatable).") var eventId: [String] = []
        @Option(help: "Events whose time is at or after this.") var since: String?
        @Option(help: "Events whose time is before this (with --since).") var until: String?
        @Option(help: "The events topic (default: $EVENTS_TOPIC or appstore.entitlement-events.v1).") var eventsTopic: String?

        func validate() throws {
            guard eventId.isEmpty != (since == nil) else { throw ValidationError("give --event-id or --since (with --until if you like), not both") }
            if until != nil, since == nil { throw ValidationError("--until goes with --since") }
        }

        func run() async throws {
            let configuration = try connection.configuration()
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let from = try since.map { try parseTime($0, now: now, option: "--since") }
            let to = try until.map { try parseTime($0, now: now, option: "--until") }
            let ids = Set(eventId)
            let endpoint = try await WebhooksCommand.withWebhookStore(connection) { store in try await WebhooksCommand.endpoint(self.endpoint, in: store) }
            var events: [WebhookEvent] = []
            try await TopicReader.forEach(eventsTopic ?? configuration.events.topic, client: try configuration.requireKafka(), logger: toolLogger, since: from) { record in
                guard let event = WebhookEvent(record: record) else { return }
                let time = Int64(event.time.timeIntervalSince1970 * 1000)
                if !ids.isEmpty {
                    if ids.contains(event.id), !events.contains(where: { $0.id == event.id }) { events.append(event) }
                    return
                }
                if let from, time >= from, to.map({ time < $0 }) ?? true, endpoint.wants(event), !events.contains(where: { $0.id == event.id }) {
                    events.append(event)
                }
            }
            if let missing = ids.subtracting(events.map(\.id)).sorted().first {
                throw ToolFailure("event \(UntrustedText.quoted(missing, limit: 80)) is not in the events topic (past its retention, or never written)")
            }
            // An id names the event, not the right to send it anywhere: the endpoint's filters (apps, environment,
            // types) hold for a replay as for a live delivery.
            if let unwanted = events.first(where: { !endpoint.wants($0) }) {
                throw ToolFailure(
                    "event \(UntrustedText.quoted(unwanted.id, limit: 80)) (\(UntrustedText.quoted(unwanted.type, limit: 60)), app \(UntrustedText.quoted(unwanted.bundleId ?? "-", limit: 100))) is not one \(endpoint.id)'s filters want; nothing was replayed")
            }
            let picked = events
            let count = try await WebhooksCommand.withWebhookStore(connection) { store in try await store.replay(picked, endpoint: endpoint) }
            print("replaying \(count) event(s) to \(endpoint.id), in topic order; the webhooks service delivers them\(endpoint.enabled ? "" : " once the endpoint is enabled")")
        }
    }

    struct Test: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "test", abstract: "Send a webhook.test event to an endpoint now, signed as every delivery, and show the answer.")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The endpoint id.") var endpoint: String

        func run() async throws {
            let settings = try WebhooksCommand.settings()
            let endpoint = try await WebhooksCommand.withWebhookStore(connection) { store in try await WebhooksCommand.endpoint(self.endpoint, in: store) }
            let id = "test-" + UUID().uuidString.lowercased()
            let body = JSONObject([
                "specversion": .string("1.0"), "id": .string(id), "source": .string("/webhooks/\(endpoint.id)"), "type": .string("webhook.test"),
                "subject": .string(endpoint.id), "time": .string(Timestamp(Date()).rfc3339Milliseconds), "datacontenttype": .string("application/json"),
                "data": .object(JSONObject(["endpointId": .string(endpoint.id), "message": .string("A test delivery from pipelinectl webhooks test.")])),
            ])
            let sender = WebhookSender(timeout: settings.timeout, allowPrivateTargets: settings.allowPrivate)
            let attempt = await sender.deliver(
                url: endpoint.url, allowHTTP: endpoint.allowHTTP, id: id, body: Array(body.serialized.utf8), secrets: endpoint.signingSecrets())
            print("POST \(UntrustedText.escaped(endpoint.url, limit: 120)) webhook-id \(id)")
            print("→ \(attempt.status.map { "HTTP \($0)" } ?? "no answer: " + UntrustedText.escaped(attempt.error ?? "", limit: 300)) in \(attempt.latencyMilliseconds) ms")
            if let excerpt = attempt.responseExcerpt, !excerpt.isEmpty { print("  \(UntrustedText.escaped(excerpt, limit: 500))") }
            if !attempt.succeeded { throw ExitCode(1) }
        }
    }

    struct Deliveries: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "deliveries", abstract: "The delivery log of an endpoint, newest first.")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The endpoint id.") var endpoint: String
        @Flag(help: "Only failing (retrying) and dead deliveries.") var failed = false
        @Option(help: "At most this many.") var limit = 50
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let (endpoint, failed, limit) = (endpoint, failed, limit)
            let rows = try await WebhooksCommand.withWebhookStore(connection) { store in
                _ = try await WebhooksCommand.endpoint(endpoint, in: store)
                return try await store.deliveries(endpointId: endpoint, failedOnly: failed, limit: limit)
            }
            if json {
                printJSON(.array(rows.map { row in
                    .object(JSONObject([
                        "id": jsonValue(row.id), "eventId": .string(row.eventId), "type": .string(row.eventType), "subject": .string(row.subject),
                        "status": .string(row.status), "attempts": jsonValue(row.attempts), "lastStatus": jsonValue(row.lastStatus),
                        "lastError": jsonValue(row.lastError), "latencyMs": jsonValue(row.lastLatencyMilliseconds),
                        // Stored escaped (WebhookStore.record): bounded here, not escaped a second time.
                        "responseExcerpt": jsonValue(row.responseExcerpt.map { String($0.prefix(500)) }),
                        "createdAt": jsonValue(row.createdAt), "nextAttemptAt": jsonValue(row.nextAttemptAt),
                    ]))
                }))
                return
            }
            print("STATUS     ATTEMPTS  LAST       TYPE                      SUBJECT            EVENT ID")
            for row in rows {
                let last = row.lastStatus.map { "HTTP \($0)" } ?? (row.lastError == nil ? "-" : "error")
                print("\(row.status.padding(toLength: 10, withPad: " ", startingAt: 0)) \(String(row.attempts).padding(toLength: 9, withPad: " ", startingAt: 0)) \(last.padding(toLength: 10, withPad: " ", startingAt: 0)) \(UntrustedText.escaped(row.eventType, limit: 25).padding(toLength: 25, withPad: " ", startingAt: 0)) \(UntrustedText.escaped(row.subject, limit: 18).padding(toLength: 18, withPad: " ", startingAt: 0)) \(UntrustedText.escaped(row.eventId, limit: 60))")
                if let error = row.lastError { print("           \(UntrustedText.escaped(error, limit: 200))") }
            }
        }
    }
}
