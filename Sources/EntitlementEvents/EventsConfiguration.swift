/// The entitlement events' settings, shared by the worker (outbox and relay) and `pipelinectl` (topic, tail).
/// Read from the environment by `fromEnvironment` (`EVENTS_*`); the defaults are the documented ones.
public struct EventsConfiguration: Sendable, Hashable {
    /// `EVENTS_ENABLED` (default true): whether batches write events to the outbox and the workers relay them.
    public var enabled = true
    /// `EVENTS_TOPIC`: the CloudEvents topic app backends (and the webhooks service) read.
    public var topic = "appstore.entitlement-events.v1"
    /// `EVENTS_TOPIC_PARTITIONS`: partitions `pipelinectl topics ensure` gives the events topic.
    public var partitions: Int32 = 12
    /// `EVENTS_OUTBOX_RETENTION` (default 7 days): published outbox rows are pruned after this.
    public var outboxRetention: Duration = .seconds(7 * 86_400)
    /// `EVENTS_RELAY_BATCH_SIZE`: outbox rows per relay round (one transaction, one produce of them all).
    public var relayBatchSize = 500
    /// `EVENTS_RELAY_INTERVAL`: how long the relay sleeps when the outbox is empty (or another relay is elected).
    public var relayInterval: Duration = .milliseconds(200)

    public init() {}
}
