import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import PipelineOperations
import Foundation

/// `pipelinectl migrate`: applies the schema migrations the worker would apply at start; `migrate online` copies
/// the tables migration 28 partitions beside the running writers first, so that the migration only swaps.
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending PostgreSQL schema migrations (under an advisory lock; safe to run concurrently).",
        subcommands: [MigrateApplyCommand.self, MigrateOnlineCommand.self], defaultSubcommand: MigrateApplyCommand.self)
}

/// `pipelinectl migrate [apply]`: every pending migration, or those up to `--through`.
struct MigrateApplyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apply",
        abstract: "Apply pending PostgreSQL schema migrations (under an advisory lock; safe to run concurrently).")

    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "List the pending migrations without applying them.") var dryRun = false
    @Option(help: "Apply the pending migrations up to this version only (for example the one before `migrate online`).") var through: Int?
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let configuration = try connection.configuration()
        let (pending, applied) = try await configuration.withStore(logger: toolLogger) { store in
            let pending = try await store.pendingMigrations().filter { $0.version <= (through ?? Int.max) }
            return (pending.map { ($0.version, $0.name) }, dryRun ? [] : try await store.migrate(through: through))
        }
        if json {
            printJSON(.object(JSONObject([
                "pending": .array(pending.map { .object(JSONObject(["version": .number(JSONNumber(Int64($0.0))), "name": .string($0.1)])) }),
                "applied": .array(applied.map { .number(JSONNumber(Int64($0))) }),
                "dryRun": .bool(dryRun),
                "schemaVersion": .number(JSONNumber(Int64(Migrations.all.last?.version ?? 0))),
            ])))
            return
        }
        if pending.isEmpty { print("schema is up to date (version \(through ?? Migrations.all.last?.version ?? 0))") }
        for (version, name) in pending { print("\(dryRun ? "pending" : "applied") \(version): \(name)") }
    }
}

/// `pipelinectl migrate online`: the outbox and the webhook tables copied into their partitioned twins while the
/// workers and the webhooks service run (`OnlineRepartition`); `--swap` then applies migration 28, which only
/// copies the last rows and swaps (docs/scale.md, "Migrating a large deployment online").
struct MigrateOnlineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "online",
        abstract: "Copy the tables migration \(OnlineRepartition.version) partitions beside the running writers, so the migration only swaps.")

    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Rows per batch (each its own short transaction).") var batchSize = 10_000
    @Flag(help: "Then apply the pending migrations (migration \(OnlineRepartition.version) swaps in a short transaction).") var swap = false

    func run() async throws {
        let configuration = try connection.configuration()
        try await configuration.withStore(logger: toolLogger) { store in
            var repartition = OnlineRepartition(client: store.client, logger: toolLogger)
            repartition.batchSize = batchSize
            let started = ContinuousClock.now
            try await repartition.prepare()
            print("prepared: partitioned twins, their partitions, and triggers mirroring every write (\(Self.format(since: started)))")
            let copies = try await repartition.copy { copy in
                if copy.batches % 20 == 0 { print("  \(copy.table): \(copy.rowsRead) rows read, \(copy.rowsInserted) copied (\(String(format: "%.1f", copy.seconds)) s)") }
            }
            for copy in copies {
                print("copied \(copy.table): \(copy.rowsRead) rows read, \(copy.rowsInserted) copied in \(copy.batches) batches, \(String(format: "%.1f", copy.seconds)) s")
            }
            for count in try await repartition.counts() {
                print("  \(count.table): \(count.old) rows, twin \(count.twin)")
            }
            guard swap else {
                print("copy complete; the swap is migration \(OnlineRepartition.version): `pipelinectl migrate`, or the first worker of the new version")
                return
            }
            let swapStarted = ContinuousClock.now
            let applied = try await store.migrate()
            print("applied \(applied.map(String.init).joined(separator: ", ")) in \(Self.format(since: swapStarted))")
        }
    }

    static func format(since start: ContinuousClock.Instant) -> String {
        let elapsed = ContinuousClock.now - start
        return String(format: "%.3f s", Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }
}
