import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import Foundation
import PipelineConfiguration
import ServiceRuntime

/// `pipelinectl retention show|run`: what each store keeps, and the prune job the workers also run
/// (`RETENTION_INTERVAL`).
struct RetentionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retention", abstract: "Show each store's retention and prune what is past it (docs/privacy.md).", subcommands: [Show.self, Run.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Each database store's retention as the environment sets it.")
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let policy = try RetentionPolicy.fromEnvironment(EnvironmentReader())
            if json {
                printJSON(.object(JSONObject(members: policy.stores.map { store in
                    // Days, as before; a limit of part days (WEBHOOK_DELIVERY_RETENTION=36h) as a decimal number of days.
                    .init(key: store.store, value: store.limit.map { limit in
                        let seconds = limit.components.seconds
                        return .number(seconds % 86_400 == 0 ? JSONNumber(seconds / 86_400) : JSONNumber(literal: String(format: "%.4f", Double(seconds) / 86_400)))
                    } ?? .string("keep"))
                })))
            } else {
                for store in policy.stores { print("\(store.store): \(RetentionPolicy.describe(store.limit)) (\(store.variable))") }
            }
        }
    }

    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "run", abstract: "Delete what is past its retention, in batches of short transactions.",
            discussion: "The same job every worker runs each RETENTION_INTERVAL. Limits come from ARCHIVE_RETENTION_DAYS and the others (`retention show`).")

        @OptionGroup var connection: ConnectionOptions
        @Flag(help: "Count what would be deleted; delete nothing.") var dryRun = false
        @Option(help: "Prune as if it were this time (ISO 8601), e.g. to check a policy ahead of time.") var asOf: String?
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let policy = try RetentionPolicy.fromEnvironment(EnvironmentReader())
            let now = try asOf.map { Date(timeIntervalSince1970: Double(try parseISO8601($0)) / 1000) } ?? Date()
            let dryRun = dryRun
            let deleted = try await connection.withMigratedStore { store in
                try await RetentionStore(client: store.client, logger: toolLogger).prune(policy, now: now, dryRun: dryRun)
            }
            if json {
                printJSON(.object(JSONObject(members: deleted.sorted { $0.key < $1.key }.map { .init(key: $0.key, value: .number(JSONNumber(Int64($0.value)))) })))
            } else {
                for (store, count) in deleted.sorted(by: { $0.key < $1.key }) { print("\(store): \(count) \(dryRun ? "past retention" : "deleted")") }
            }
        }
    }
}
