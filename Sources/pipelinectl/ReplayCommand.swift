import AppStoreNotifications
import ArgumentParser
import KafkaClient

/// `pipelinectl replay`: move the workers' group back (or forward) after an outage.
struct ReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Move a consumer group's committed offsets, so the workers reprocess (or skip) records.",
        discussion: """
            --to earliest | latest | offset:P=O[,P=O...] | time:2026-11-20T10:00:00Z (minus --clock-skew-seconds, 300 by default)
            Refused while the group has active members: stop the workers (scale to 0), replay, start them again.
            Replays are harmless: every notification is deduplicated by notificationUUID and state only moves forward
            by signedDate, so reprocessing changes nothing that was already stored.
            """)

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The consumer group (default: $WORKER_GROUP_ID or appstore-worker).") var group: String?
    @Option(help: "Where to: earliest, latest, offset:P=O,..., time:ISO-8601.") var to: String
    @Option(help: "Only these partitions (comma-separated numbers).") var partitions: String?
    @Option(help: "For --to time: start this many seconds earlier, so records stamped by an ingest whose clock ran ahead are not skipped (replaying a little more is harmless).")
    var clockSkewSeconds: Int = 300
    @Flag(help: "Show the plan without moving anything.") var dryRun = false
    @Flag(help: "Print JSON.") var json = false

    func target() throws -> KafkaAdminClient.OffsetTarget {
        switch to {
        case "earliest": return .earliest
        case "latest": return .latest
        case let value where value.hasPrefix("offset:"):
            var offsets: [Int32: Int64] = [:]
            for pair in value.dropFirst("offset:".count).split(separator: ",") {
                let parts = pair.split(separator: "=")
                guard parts.count == 2, let partition = Int32(parts[0]), let offset = Int64(parts[1]), offset >= 0 else {
                    throw ValidationError("\"\(pair)\" is not partition=offset")
                }
                offsets[partition] = offset
            }
            guard !offsets.isEmpty else { throw ValidationError("offset: needs at least one partition=offset") }
            return .offsets(offsets)
        case let value where value.hasPrefix("time:"):
            // Record timestamps are ingest's receive times: an ingest clock ahead of the operator's would put a
            // record received just after T before T's offset. Start a margin earlier; duplicates are harmless.
            let time = try parseISO8601(String(value.dropFirst("time:".count)))
            return .timestamp(time - Int64(max(0, clockSkewSeconds)) * 1_000, lookup: .scan)
        default:
            throw ValidationError("--to must be earliest, latest, offset:P=O,... or time:ISO-8601")
        }
    }

    func run() async throws {
        let configuration = try connection.configuration()
        let groupId = group ?? configuration.groupId
        let selected = try partitions.map { list in
            try list.split(separator: ",").map { text in
                guard let partition = Int32(text.trimmingCharacters(in: .whitespaces)) else { throw ValidationError("\"\(text)\" is not a partition number") }
                return partition
            }
        }
        let admin = try KafkaAdminClient(configuration: try configuration.requireKafka(), logger: toolLogger)
        let plan: [KafkaAdminClient.OffsetReset]
        do {
            plan = try await admin.resetGroupOffsets(groupId, topic: configuration.topic, partitions: selected, to: try target(), dryRun: dryRun)
        } catch let error as KafkaAdminClient.GroupHasActiveMembers {
            await admin.close()
            throw ValidationError("\(error)")
        }
        await admin.close()
        let total = plan.reduce(Int64(0)) { $0 + $1.toProcess }
        let note = "replays are harmless: notifications are deduplicated by notificationUUID and state only moves forward by signedDate"
        if json {
            printJSON(.object(JSONObject([
                "group": .string(groupId), "topic": .string(configuration.topic), "dryRun": .bool(dryRun), "toProcess": .number(JSONNumber(total)),
                "partitions": .array(plan.map { reset in
                    .object(JSONObject([
                        "partition": .number(JSONNumber(Int64(reset.partition.partition))), "before": jsonValue(reset.before),
                        "after": .number(JSONNumber(reset.after)), "end": .number(JSONNumber(reset.end)), "toProcess": .number(JSONNumber(reset.toProcess)),
                    ]))
                }),
                "note": .string(note),
            ])))
            return
        }
        print("\(dryRun ? "plan (dry run, nothing moved)" : "moved") group \(groupId) on \(configuration.topic):")
        for reset in plan {
            print("  partition \(reset.partition.partition): \(reset.before.map(String.init) ?? "none") → \(reset.after) (end \(reset.end), \(reset.toProcess) to process)")
        }
        print("\(total) record(s) will be processed when the workers start; \(note).")
    }
}
