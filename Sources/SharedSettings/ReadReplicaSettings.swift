import EntitlementStore
import Logging
import PipelineConfiguration
import PostgresNIO

/// `POSTGRES_READ_URL` and its companions: where the customer API's reads, the console's pages and `pipelinectl
/// metrics` go (docs/scale.md, "Reads from replicas"). Without `POSTGRES_READ_URL` every read goes to
/// `POSTGRES_URL`, as before. The worker, every write and every lock never read these.
public struct ReadReplicaSettings: Sendable, Hashable {
    /// `POSTGRES_READ_URL`: streaming replicas of `POSTGRES_URL`, comma-separated (none: read from the primary).
    public var replicaURLs: [String] = []
    public var routing = ReadRoutingSettings()

    public init() {}

    /// Each described once: the parser below, `--help` and the docs' settings tables read these.
    enum Settings {
        static let replicaURLs = Setting<[String]>(
            SettingDescription(
                variable: "POSTGRES_READ_URL",
                summary: "streaming replicas of `POSTGRES_URL` for reads (the customer API's, the console's, `pipelinectl metrics`), comma-separated `postgres://` URLs; writes, locks and the worker stay on `POSTGRES_URL`",
                defaultText: nil)
        ) { environment throws(ConfigurationError) in
            let urls = environment.list("POSTGRES_READ_URL", default: [])
            for url in urls {
                do {
                    _ = try PostgresClient.Configuration(url: url)
                } catch {
                    throw ConfigurationError(variable: "POSTGRES_READ_URL", reason: "\(error)".replacingOccurrences(of: "POSTGRES_URL", with: "each of POSTGRES_READ_URL"))
                }
            }
            return urls
        }
        static let wait = Setting.duration(
            "POSTGRES_READ_WAIT", default: .milliseconds(200), range: .zero ... .seconds(10),
            "a read with a consistency token waits this long for a replica to replay past it, then the primary answers")
        static let maximumLag = Setting.duration(
            "POSTGRES_READ_MAX_LAG", default: .seconds(5), range: .milliseconds(100) ... .seconds(3_600),
            "a replica further behind the primary than this (or down) is skipped until it catches up: the primary answers")
        static let sticky = Setting.duration(
            "POSTGRES_READ_STICKY", default: .seconds(5), range: .zero ... .seconds(600),
            "after a purchase, an ownership change or an erasure, that customer's and transaction's reads in this process carry the write's token this long without being sent it (0: only sent tokens count)")

        static let catalog = SettingsCatalog(
            component: "read-replicas", settings: [replicaURLs.description, wait.description, maximumLag.description, sticky.description])
    }

    public static var catalog: SettingsCatalog { Settings.catalog }
    public static let environmentKeys = Settings.catalog.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader) throws(ConfigurationError) -> ReadReplicaSettings {
        var settings = ReadReplicaSettings()
        settings.replicaURLs = try Settings.replicaURLs.read(environment)
        settings.routing.wait = try Settings.wait.read(environment)
        settings.routing.maximumLag = try Settings.maximumLag.read(environment)
        settings.routing.sticky = try Settings.sticky.read(environment)
        return settings
    }

    /// The reads' router over `primary` (the process's `POSTGRES_URL` pool), each replica a pool of `poolSize`.
    public func router(primary: PostgresClient, poolSize: Int, logger: Logger) throws -> ReadRouter {
        let replicas = try replicaURLs.map { url in
            var configuration = try PipelineSettings.servicePool(url: url, connections: poolSize)
            // A replica that went away is found by the probe; a read never waits long for one of its connections.
            configuration.options.connectTimeout = .milliseconds(500)
            return configuration
        }
        return ReadRouter(primary: primary, replicas: replicas, settings: routing, logger: logger)
    }
}
