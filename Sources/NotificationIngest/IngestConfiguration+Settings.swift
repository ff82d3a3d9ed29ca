import NotificationRecords
import PipelineConfiguration

extension IngestConfiguration {
    /// Each setting, described once: the parser (`fromEnvironment`), `--help` and docs/ingest.md's table read these.
    enum Settings {
        static let listener = HTTPListenerSettings(prefix: "INGEST", port: 8080, readsMilliseconds: true)
        static let (host, port) = (listener.host, listener.port)
        static let path = Setting.string("INGEST_PATH", default: "/v2/notifications", "the notification path to give App Store Connect")
        static let environmentPaths = SettingDescription(
            variable: "INGEST_ENVIRONMENT_PATHS", summary: "`/path=Environment` pairs that also accept POSTs; the environment travels as the informational `environment-hint` header",
            defaultText: "/v2/notifications/production=Production,/v2/notifications/sandbox=Sandbox")
        static let maximumBodyBytes = Setting.int(
            "INGEST_MAX_BODY_BYTES", default: 256 * 1024, range: 1_024...16 * 1_024 * 1_024, "larger bodies are refused with 400 (Apple's are about 19 KB)")
        static let topic = NotificationsTopic.setting
        static let produceTimeout = Setting.duration(
            "INGEST_PRODUCE_TIMEOUT", default: .seconds(10), range: .milliseconds(100) ... .seconds(300), deprecatedMilliseconds: "INGEST_PRODUCE_TIMEOUT_MS",
            "the broker's acknowledgement must come within this, else 503")
        static let retryAfterSeconds = Setting.int("INGEST_RETRY_AFTER_SECONDS", default: 60, range: 0...86_400, "the `Retry-After` of a 503, in seconds")
        static let instanceId = SettingDescription(
            variable: "INGEST_INSTANCE_ID", summary: "this instance's name in the `ingest-instance` header", defaultText: nil)
        static let (idleTimeout, requestTimeout) = (listener.idleTimeout, listener.requestTimeout)
        static let maximumConnections = Setting.int(
            "INGEST_MAX_CONNECTIONS", default: 1_024, range: 1...1_000_000, "open connections at most; further ones wait in the listen backlog")
        static let readinessCache = Setting.duration(
            "INGEST_READINESS_CACHE", default: .seconds(2), range: .zero ... .seconds(60), deprecatedMilliseconds: "INGEST_READINESS_CACHE_MS",
            "how long `/health/ready` reuses its broker probe")
        static let shutdownDrain = Setting.duration(
            "INGEST_SHUTDOWN_DRAIN", default: .seconds(5), range: .zero ... .seconds(120), deprecatedMilliseconds: "INGEST_SHUTDOWN_DRAIN_MS",
            "after SIGTERM, readiness fails this long while requests are still served (keep it, plus the produce timeout, below the grace period)")
        static let logLevel = SettingDescription.logLevel

        static let catalog = SettingsCatalog(component: "ingest", settings: [
            host.description, port.description, path.description, environmentPaths, maximumBodyBytes.description, topic.description,
            produceTimeout.description, retryAfterSeconds.description, instanceId, idleTimeout.description, requestTimeout.description,
            maximumConnections.description, readinessCache.description, shutdownDrain.description, logLevel,
        ])
    }
}
