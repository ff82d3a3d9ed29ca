import ArgumentParser
import Console
import CustomerAPI
import EntitlementEvents
import KafkaClient
import NotificationIngest
import NotificationWorker
import SharedSettings
import Webhooks

/// `pipelinectl settings <service> [--markdown]`: a service's settings as its `--help` lists them, or the docs' table.
/// The table in docs/<service>.md is this output; a test holds the two equal.
struct SettingsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settings", abstract: "Print a service's settings (variable, default, meaning), or the docs' Markdown table.")

    /// The services whose settings are described declaratively (one description per setting).
    static let catalogs = Dictionary(uniqueKeysWithValues: [
        IngestConfiguration.catalog, WorkerConfiguration.catalog, EventsConfiguration.catalog, CustomerAPIConfiguration.catalog,
        WebhooksConfiguration.catalog, ConsoleConfiguration.catalog, PipelineSettings.catalog, KafkaEnvironment.catalog, ReadReplicaSettings.catalog,
    ].map { ($0.component, $0) })

    @Argument(help: "The service: \(SettingsCommand.catalogs.keys.sorted().joined(separator: ", ")).")
    var service: String

    @Flag(help: "The Markdown table of docs/<service>.md.")
    var markdown = false

    func run() throws {
        guard let catalog = Self.catalogs[service] else {
            throw ValidationError("no settings catalog for \(service) (known: \(Self.catalogs.keys.sorted().joined(separator: ", ")))")
        }
        print(markdown ? catalog.markdownTable : catalog.helpLines)
    }
}
