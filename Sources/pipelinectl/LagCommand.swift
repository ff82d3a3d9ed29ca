import AppStoreNotifications
import ArgumentParser
import KafkaClient

/// `pipelinectl lag`.
struct LagCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lag", abstract: "Show a consumer group's committed offset, end offset and lag per partition.")

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The consumer group (default: $WORKER_GROUP_ID or appstore-worker).") var group: String?
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let configuration = try connection.configuration()
        let groupId = group ?? configuration.groupId
        let admin = try KafkaAdminClient(configuration: try configuration.requireKafka(), logger: toolLogger)
        let description = try await admin.describeGroup(groupId, topics: [configuration.topic])
        await admin.close()
        let positions = description.positions.sorted { $0.partition < $1.partition }
        let total = positions.reduce(Int64(0)) { $0 + $1.lag }
        if json {
            printJSON(.object(JSONObject([
                "group": .string(groupId), "state": .string(description.state), "members": .number(JSONNumber(Int64(description.members.count))),
                "totalLag": .number(JSONNumber(total)),
                "partitions": .array(positions.map { position in
                    .object(JSONObject([
                        "topic": .string(position.partition.topic), "partition": .number(JSONNumber(Int64(position.partition.partition))),
                        "committed": jsonValue(position.committed), "end": .number(JSONNumber(position.end)), "lag": .number(JSONNumber(position.lag)),
                    ]))
                }),
            ])))
            return
        }
        print("group \(groupId): \(description.state), \(description.members.count) member(s) listed, total lag \(total)")
        print("topic".padding(toLength: 40, withPad: " ", startingAt: 0) + " partition   committed         end         lag")
        for position in positions {
            let committed = position.committed.map(String.init) ?? "-"
            print(position.partition.topic.padding(toLength: 40, withPad: " ", startingAt: 0)
                + String(repeating: " ", count: max(0, 10 - String(position.partition.partition).count)) + String(position.partition.partition)
                + String(repeating: " ", count: max(0, 12 - committed.count)) + committed
                + String(repeating: " ", count: max(0, 12 - String(position.end).count)) + String(position.end)
                + String(repeating: " ", count: max(0, 12 - String(position.lag).count)) + String(position.lag))
        }
    }
}
