import AppStoreNotifications
import ArgumentParser
import EntitlementStore

/// `pipelinectl migrate`: applies the schema migrations the worker would apply at start.
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending PostgreSQL schema migrations (under an advisory lock; safe to run concurrently).")

    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "List the pending migrations without applying them.") var dryRun = false
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let configuration = try connection.configuration()
        let (pending, applied) = try await configuration.withStore(logger: toolLogger) { store in
            let pending = try await store.pendingMigrations()
            return (pending.map { ($0.version, $0.name) }, dryRun ? [] : try await store.migrate())
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
        if pending.isEmpty { print("schema is up to date (version \(Migrations.all.last?.version ?? 0))") }
        for (version, name) in pending { print("\(dryRun ? "pending" : "applied") \(version): \(name)") }
    }
}
