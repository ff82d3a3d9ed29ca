import AppStoreNotifications
import ArgumentParser
import KafkaClient

/// `pipelinectl topics ensure`.
struct TopicsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "topics", abstract: "Manage the pipeline's Kafka topics.", subcommands: [Ensure.self])

    struct Ensure: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ensure",
            abstract: "Create the notifications and dead-letter topics if missing (existing topics are left as they are).",
            discussion: """
                Partitions, replication and retention come from TOPIC_PARTITIONS (96), TOPIC_REPLICATION_FACTOR (3),
                TOPIC_RETENTION_DAYS (14: longer than Apple's ~6.5-day retry window) and DEAD_LETTER_RETENTION_DAYS (28),
                or the options below.
                """)

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "Partitions of the notifications topic: the most workers that can share the load.") var partitions: Int32?
        @Option(help: "Replication factor (3 on a production cluster, 1 for a single broker).") var replicationFactor: Int32?
        @Option(help: "Retention of the notifications topic, in days (at least 7).") var retentionDays: Int?
        @Flag(help: "Show what would be created without creating it.") var dryRun = false
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            var configuration = try connection.configuration()
            if let partitions { configuration.partitions = partitions }
            if let replicationFactor { configuration.replicationFactor = replicationFactor }
            if let retentionDays {
                guard retentionDays >= 7 else { throw ValidationError("--retention-days must be at least 7 (Apple retries for about 6.5 days)") }
                configuration.retentionDays = retentionDays
            }
            let admin = try KafkaAdminClient(configuration: try configuration.requireKafka(), logger: toolLogger)
            let existing = try await admin.listTopics()
            var outcome: [String: String] = [:]
            if dryRun {
                for topic in configuration.topicSpecifications { outcome[topic.name] = existing[topic.name] == nil ? "would be created" : "exists" }
            } else {
                for (name, creation) in try await admin.createTopics(configuration.topicSpecifications) {
                    outcome[name] = creation == .created ? "created" : "exists"
                }
            }
            await admin.close()
            let specifications = configuration.topicSpecifications
            if json {
                printJSON(.array(specifications.map { topic in
                    .object(JSONObject([
                        "topic": .string(topic.name), "outcome": .string(outcome[topic.name] ?? "unknown"),
                        "partitions": .number(JSONNumber(Int64(existing[topic.name] ?? Int(topic.partitions)))),
                        "replicationFactor": .number(JSONNumber(Int64(topic.replicationFactor))),
                        "retentionMs": jsonValue(Int64(topic.config["retention.ms"] ?? "")),
                    ]))
                }))
            } else {
                for topic in specifications {
                    let partitions = existing[topic.name] ?? Int(topic.partitions)
                    print("\(topic.name): \(outcome[topic.name] ?? "unknown") (\(partitions) partitions, replication \(topic.replicationFactor), retention \((Int64(topic.config["retention.ms"] ?? "0") ?? 0) / 86_400_000) days)")
                }
            }
        }
    }
}
