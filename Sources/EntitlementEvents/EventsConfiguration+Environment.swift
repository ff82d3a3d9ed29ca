import PipelineConfiguration

extension EventsConfiguration {
    /// The events settings, each described once: the parser below, the worker's `--help` and docs/events.md's
    /// table read these (the worker writes the outbox and relays it; `pipelinectl` reads the topic's name).
    enum Settings {
        static let enabled = Setting.bool("EVENTS_ENABLED", default: true, "`false`: batches write no events and no relay runs (re-enabling later numbers on from the row's last event)")
        static let topic = Setting.string("EVENTS_TOPIC", default: "appstore.entitlement-events.v1", "the CloudEvents topic app backends (and the webhooks service) read")
        static let partitions = Setting.int(
            "EVENTS_TOPIC_PARTITIONS", default: 12, range: 1...10_000, "partitions `pipelinectl topics ensure` gives the events topic")
        static let outboxRetention = Setting.duration(
            "EVENTS_OUTBOX_RETENTION", default: .seconds(7 * 86_400), range: .seconds(60) ... .seconds(3_650 * 86_400),
            "published outbox rows are pruned after this (`90m`, `36h`, `7d`; at least a minute)")
        static let relayBatchSize = Setting.int(
            "EVENTS_RELAY_BATCH_SIZE", default: 500, range: 1...10_000, "outbox rows per relay round (one transaction, one produce of them all)")
        static let relayInterval = Setting.duration(
            "EVENTS_RELAY_INTERVAL", default: .milliseconds(200), range: .milliseconds(10) ... .seconds(60), deprecatedMilliseconds: "EVENTS_RELAY_INTERVAL_MS",
            "how long the relay sleeps when the outbox is empty (or another worker's relay is elected)")

        static let catalog = SettingsCatalog(component: "events", settings: [
            enabled.description, topic.description, partitions.description, outboxRetention.description, relayBatchSize.description,
            relayInterval.description,
        ])
    }

    /// The events settings, for the worker's `--help`, the docs and `pipelinectl settings events`.
    public static var catalog: SettingsCatalog { Settings.catalog }

    /// The variables the events settings are read from (worker and pipelinectl).
    public static let environmentKeys = Settings.catalog.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader) throws(ConfigurationError) -> EventsConfiguration {
        var configuration = EventsConfiguration()
        configuration.enabled = try Settings.enabled.read(environment)
        configuration.topic = try Settings.topic.read(environment)
        configuration.partitions = Int32(try Settings.partitions.read(environment))
        configuration.outboxRetention = try Settings.outboxRetention.read(environment)
        configuration.relayBatchSize = try Settings.relayBatchSize.read(environment)
        configuration.relayInterval = try Settings.relayInterval.read(environment)
        return configuration
    }
}
