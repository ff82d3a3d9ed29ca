import PipelineConfiguration

extension EventsConfiguration {
    /// The variables the events settings are read from (worker and pipelinectl).
    public static let environmentKeys = [
        "EVENTS_ENABLED", "EVENTS_TOPIC", "EVENTS_TOPIC_PARTITIONS", "EVENTS_OUTBOX_RETENTION", "EVENTS_RELAY_BATCH_SIZE", "EVENTS_RELAY_INTERVAL", "EVENTS_RELAY_INTERVAL_MS",
    ]

    public static func fromEnvironment(_ environment: EnvironmentReader) throws(ConfigurationError) -> EventsConfiguration {
        var configuration = EventsConfiguration()
        configuration.enabled = try environment.bool("EVENTS_ENABLED", default: configuration.enabled)
        configuration.topic = environment.string("EVENTS_TOPIC", default: configuration.topic)
        configuration.partitions = Int32(try environment.int("EVENTS_TOPIC_PARTITIONS", default: Int(configuration.partitions), range: 1...10_000))
        if let text = environment.optionalString("EVENTS_OUTBOX_RETENTION") {
            guard let milliseconds = DurationText.milliseconds(text), milliseconds >= 60_000 else {
                throw ConfigurationError(variable: "EVENTS_OUTBOX_RETENTION", reason: "\"\(text.prefix(40))\" is not a duration of at least a minute (e.g. 7d, 36h, 90m)")
            }
            configuration.outboxRetention = .milliseconds(milliseconds)
        }
        configuration.relayBatchSize = try environment.int("EVENTS_RELAY_BATCH_SIZE", default: configuration.relayBatchSize, range: 1...10_000)
        configuration.relayInterval = try environment.duration("EVENTS_RELAY_INTERVAL", default: .milliseconds(200), range: .milliseconds(10) ... .seconds(60), deprecatedMilliseconds: "EVENTS_RELAY_INTERVAL_MS")
        return configuration
    }
}
