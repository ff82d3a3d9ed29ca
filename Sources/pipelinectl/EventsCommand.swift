import AppStoreNotifications
import ArgumentParser
import EntitlementEvents
import Foundation
import KafkaClient
import PipelineOperations

/// `pipelinectl events tail`.
struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "events", abstract: "Read the entitlement events topic.", subcommands: [Tail.self])

    struct Tail: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tail",
            abstract: "Print the events topic (not the outbox), one line per event, escaped; memory stays bounded.",
            discussion: """
                The topic is EVENTS_TOPIC (default appstore.entitlement-events.v1). --from earliest reads it all;
                --from <time> (ISO-8601, or relative: 3d, 12h, 30m) starts at the records published since then.
                With --follow it keeps printing new events until interrupted.
                """)

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The events topic (default: $EVENTS_TOPIC or appstore.entitlement-events.v1).") var eventsTopic: String?
        @Flag(help: "Keep printing new events until interrupted.") var follow = false
        @Option(help: "earliest, or a time (ISO-8601, or relative such as 3d).") var from = "earliest"
        @Option(help: "Only events of this bundle id (repeatable).") var bundleId: [String] = []
        @Option(help: "Only events of this subscription.") var originalTransactionId: String?
        @Option(help: "Only events of this type, e.g. entitlement.revoked (repeatable).") var type: [String] = []
        @Flag(help: "Print each event as one JSON object (the CloudEvents structured form).") var json = false

        func run() async throws {
            let configuration = try connection.configuration()
            let topic = eventsTopic ?? configuration.events.topic
            let since: Int64? = from == "earliest" ? nil : try parseTime(from, now: Int64(Date().timeIntervalSince1970 * 1000), option: "--from")
            let bundles = Set(bundleId)
            let types = Set(type)
            try await TopicReader.forEach(topic, client: try configuration.requireKafka(), logger: toolLogger, since: since, follow: follow) { record in
                if let since, let timestamp = record.timestamp, timestamp < since { return }
                guard let event = CloudEventRecord.structured(record) else { return }
                let data = event["data"]?.objectValue
                if !types.isEmpty, !types.contains(event["type"]?.stringValue ?? "") { return }
                if !bundles.isEmpty, !bundles.contains(data?["bundleId"]?.stringValue ?? "") { return }
                if let originalTransactionId, event["subject"]?.stringValue != originalTransactionId { return }
                // Written at once (not through print's buffer), so that --follow into a pipe shows each event as it comes.
                let line = json ? JSONValue.object(event).serialized : Self.line(event)
                FileHandle.standardOutput.write(Data((line + "\n").utf8))
            }
        }

        /// `time type subject #sequence bundle/environment status → status (active → active) cause id`, every value
        /// from the topic escaped (an event's text is ours, but the topic is open to other producers).
        static func line(_ event: JSONObject) -> String {
            func text(_ value: JSONValue?) -> String {
                switch value {
                case .string(let string)?: UntrustedText.escaped(string, limit: 80)
                case .bool(let bool)?: String(bool)
                case .number(let number)?: number.literal
                default: "-"
                }
            }
            let data = event["data"]?.objectValue
            let before = data?["before"]?.objectValue
            let after = data?["after"]?.objectValue
            let cause = data?["cause"]?.objectValue
            var parts = [text(event["time"]), text(event["type"]), text(event["subject"])]
            if let sequence = data?["sequence"], sequence != .null { parts.append("#" + text(sequence)) }
            parts.append(text(data?["bundleId"]) + "/" + text(data?["environment"]))
            if let after {
                parts.append("\(text(before?["status"])) → \(text(after["status"])) (active \(text(before?["isActive"])) → \(text(after["isActive"])))")
                if let expires = after["expiresDate"], expires != .null { parts.append("expires " + text(expires)) }
            }
            parts.append("cause " + text(cause?["kind"]) + ":" + text(cause?["notificationType"]) + (cause?["subtype"].map { $0 == .null ? "" : "/" + text($0) } ?? ""))
            parts.append("id " + text(event["id"]))
            return parts.joined(separator: "  ")
        }
    }
}
