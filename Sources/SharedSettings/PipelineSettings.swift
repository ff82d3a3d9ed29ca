import AppStoreNotifications
import AppStoreServerAPI
import EntitlementStore
import Foundation
import KafkaClient
import NotificationRecords
import PipelineConfiguration
import PostgresNIO

/// The settings every process that verifies or stores notifications shares, read once by one type: the topics,
/// the apps and trusted roots (so a purchase is verified under the same rules as a notification), PostgreSQL,
/// Kafka and, when configured, Apple's API key. Each service's own configuration holds this beside what only it
/// reads (`WorkerConfiguration`, `CustomerAPIConfiguration`).
public struct PipelineSettings: Sendable {
    /// `NOTIFICATIONS_TOPIC`: the topic ingest produces to.
    public var topic = NotificationsTopic.defaultName
    /// `DEAD_LETTER_TOPIC`: where permanently failing records go (default: the topic + `.dead-letter`).
    public var deadLetterTopic = NotificationsTopic.defaultDeadLetterName(of: NotificationsTopic.defaultName)
    /// `POSTGRES_URL` (required): `postgres://user[:password]@host[:port]/database`.
    public var postgresURL = ""
    /// `POSTGRES_POOL_SIZE`: connections per process.
    public var postgresPoolSize = 4
    /// `APPS` (required): the apps whose notifications are accepted, comma-separated
    /// `bundleId[:appAppleId][@Environment+Environment]`, e.g. `com.example.app:1234567890@Production+Sandbox`.
    /// Without environments an app is accepted in Production and Sandbox; Production requires the App Apple ID.
    public var apps: [AppIdentity] = []
    /// `TRUSTED_ROOTS`: comma-separated root certificates: `apple` (the embedded Apple Root CA - G3) and/or
    /// paths of PEM or DER files. Default `apple`. Anything else is for tests and the demo only.
    public var trustedRoots: [String] = ["apple"]
    /// Kafka connection settings (`KAFKA_*`).
    public var kafka: KafkaClientConfigurationValues
    /// The `APPSTORE_*` variables when `APPSTORE_KEY_ID` is set (checked at start-up for every configured
    /// environment of every app).
    public var appStoreVariables: [String: String]?
    /// `ERASURE_KEY_FILE` (a file holding at least 32 bytes, e.g. `openssl rand -hex 32`) or `ERASURE_KEY`: the
    /// secret of the erasure suppression list (docs/privacy.md). Every process that erases or applies records needs
    /// the same one; never rotate it while erasures are on record.
    public var erasureKey: ErasureKey?
    /// `CONSENT_RESCINDED_ERASES` (default false): a RESCIND_CONSENT erases what its app transaction links to.
    public var consentRescindedErases = false
    /// `VERIFY_ONLINE_CHECKS` and companions: online revocation checks of every chain verified (off by default).
    public var onlineRevocation = OnlineRevocationSettings()

    public init(kafka: KafkaClientConfigurationValues) {
        self.kafka = kafka
    }

    /// The shared settings, each described once: the parser below, the services' `--help` and docs/worker.md's
    /// table of them read these. The broker's (`KAFKA_*`: `KafkaEnvironment`) and Apple's key (`APPSTORE_*`:
    /// `AppStoreServerAPIConfiguration`) are read by their own modules.
    enum Settings {
        static let (topic, deadLetterTopic) = (NotificationsTopic.setting, NotificationsTopic.deadLetterSetting)
        static let postgresURL = Setting<String>(
            SettingDescription(variable: "POSTGRES_URL", summary: "the database (required): `postgres://user[:password]@host[:port]/database`", defaultText: nil)
        ) { environment throws(ConfigurationError) in
            let url = try environment.required("POSTGRES_URL")
            do {
                _ = try PostgresClient.Configuration(url: url)
            } catch {
                throw ConfigurationError(variable: "POSTGRES_URL", reason: "\(error)")
            }
            return url
        }
        static let postgresPoolSize = Setting.int("POSTGRES_POOL_SIZE", default: 4, range: 1...100, "connections per process")
        static let apps = Setting<[AppIdentity]>(
            SettingDescription(
                variable: "APPS", summary: "the accepted apps (required): `bundleId[:appAppleId][@Production+Sandbox]`, comma-separated; Production needs the App Apple ID",
                defaultText: nil)
        ) { environment throws(ConfigurationError) in try PipelineSettings.parseApps(try environment.required("APPS")) }
        static let trustedRoots = Setting<[String]>(
            SettingDescription(
                variable: "TRUSTED_ROOTS", summary: "`apple` (the embedded Apple Root CA - G3) and/or PEM or DER files, comma-separated; anything but `apple` is for tests and the demo",
                defaultText: "apple")
        ) { environment in environment.list("TRUSTED_ROOTS", default: ["apple"]) }
        static let erasureKeyFile = SettingDescription(
            variable: "ERASURE_KEY_FILE", summary: "a file with the erasure key (at least 32 bytes, e.g. `openssl rand -hex 32`): the suppression list's secret, the same in every process that erases or applies records; never rotated while erasures are on record (docs/privacy.md)",
            defaultText: nil)
        static let erasureKey = SettingDescription(
            variable: "ERASURE_KEY", summary: "the erasure key itself, when no file is given (a file stays out of process listings)", defaultText: nil)
        static let consentRescindedErases = Setting.bool(
            "CONSENT_RESCINDED_ERASES", default: false, "a RESCIND_CONSENT erases what its app transaction links to (needs the erasure key)")
        static let logLevel = SettingDescription.logLevel

        static let catalog = SettingsCatalog(component: "shared", settings: [
            topic.description, deadLetterTopic, postgresURL.description, postgresPoolSize.description, apps.description, trustedRoots.description,
            erasureKeyFile, erasureKey, consentRescindedErases.description,
        ] + OnlineRevocationSettings.Settings.catalog.settings + [logLevel])
    }

    /// The shared settings, for `--help`, the docs and `pipelinectl settings shared`.
    public static var catalog: SettingsCatalog { Settings.catalog }

    /// The environment variables these settings read.
    public static let environmentKeys = Settings.catalog.environmentKeys + KafkaEnvironment.keys + AppStoreServerAPIConfiguration.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader, defaultClientId: String) throws(ConfigurationError) -> PipelineSettings {
        var settings = PipelineSettings(kafka: try KafkaEnvironment.client(environment, defaultClientId: defaultClientId))
        (settings.topic, settings.deadLetterTopic) = try NotificationsTopic.names(environment)
        settings.postgresURL = try Settings.postgresURL.read(environment)
        settings.postgresPoolSize = try Settings.postgresPoolSize.read(environment)
        settings.apps = try Settings.apps.read(environment)
        settings.trustedRoots = try Settings.trustedRoots.read(environment)
        if environment.optionalString("APPSTORE_KEY_ID") != nil {
            let variables = Dictionary(uniqueKeysWithValues: AppStoreServerAPIConfiguration.environmentKeys.compactMap { key in environment.optionalString(key).map { (key, $0) } })
            for app in settings.apps {
                for target in app.environments where target == .production || target == .sandbox {
                    do {
                        _ = try AppStoreServerAPIConfiguration.fromEnvironment(variables, environment: target)
                    } catch {
                        throw ConfigurationError(variable: error.variable, reason: error.reason)
                    }
                }
            }
            settings.appStoreVariables = variables
        }
        settings.erasureKey = try Self.erasureKey(environment)
        settings.consentRescindedErases = try Settings.consentRescindedErases.read(environment)
        settings.onlineRevocation = try OnlineRevocationSettings.fromEnvironment(environment)
        if settings.consentRescindedErases, settings.erasureKey == nil {
            throw ConfigurationError(variable: "CONSENT_RESCINDED_ERASES", reason: "erasing needs the erasure key: set ERASURE_KEY_FILE too")
        }
        return settings
    }

    /// The erasure key from `ERASURE_KEY_FILE` (preferred: files stay out of process listings) or `ERASURE_KEY`.
    public static func erasureKey(_ environment: EnvironmentReader) throws(ConfigurationError) -> ErasureKey? {
        let variable: String
        let secret: String
        if let path = environment.optionalString("ERASURE_KEY_FILE") {
            variable = "ERASURE_KEY_FILE"
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(variable: variable, reason: "\(UntrustedText.quoted(path, limit: 200)) cannot be read")
            }
            secret = text
        } else if let text = environment.optionalString("ERASURE_KEY") {
            variable = "ERASURE_KEY"
            secret = text
        } else {
            return nil
        }
        do {
            return try ErasureKey(secret: secret)
        } catch {
            throw ConfigurationError(variable: variable, reason: error.description)
        }
    }

    /// `bundleId[:appAppleId][@Environment+Environment]`, comma-separated.
    public static func parseApps(_ text: String) throws(ConfigurationError) -> [AppIdentity] {
        var apps: [AppIdentity] = []
        for entry in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            let parts = entry.split(separator: "@", maxSplits: 1).map(String.init)
            let identity = parts[0].split(separator: ":", maxSplits: 1).map(String.init)
            guard let bundleId = identity.first, !bundleId.isEmpty else {
                throw ConfigurationError(variable: "APPS", reason: "\"\(entry)\" has no bundle id")
            }
            var appAppleId: Int64?
            if identity.count == 2 {
                guard let id = Int64(identity[1]), id > 0 else { throw ConfigurationError(variable: "APPS", reason: "\"\(identity[1])\" in \"\(entry)\" is not an App Apple ID") }
                appAppleId = id
            }
            var environments: Set<AppStoreNotifications.Environment> = [.production, .sandbox]
            if parts.count == 2 {
                environments = []
                for name in parts[1].split(separator: "+") {
                    guard let environment = AppStoreNotifications.Environment(rawValue: String(name)), environment.isSignedByApple else {
                        throw ConfigurationError(variable: "APPS", reason: "\"\(name)\" in \"\(entry)\" is not Production or Sandbox (Xcode and LocalTesting data is not signed by Apple)")
                    }
                    environments.insert(environment)
                }
            }
            if environments.contains(.production) && appAppleId == nil {
                throw ConfigurationError(variable: "APPS", reason: "\"\(entry)\" accepts Production, which needs the App Apple ID (bundleId:appAppleId), as Apple's library requires")
            }
            apps.append(AppIdentity(bundleId: bundleId, appAppleId: appAppleId, environments: environments))
        }
        guard !apps.isEmpty else { throw ConfigurationError(variable: "APPS", reason: "names no app") }
        return apps
    }

    /// The verifier's settings: the configured apps and roots (file contents read here, so a bad file fails start-up).
    public func verifierConfiguration() throws(ConfigurationError) -> SignedPayloadVerifier.Configuration {
        var roots: [[UInt8]] = []
        for entry in trustedRoots {
            do {
                if entry.lowercased() == "apple" {
                    roots.append(try AppleRootCertificate.derBytes)
                } else {
                    guard let data = FileManager.default.contents(atPath: entry) else {
                        throw ConfigurationError(variable: "TRUSTED_ROOTS", reason: "cannot read \(entry)")
                    }
                    roots += try TrustAnchorLoader.certificates(in: [UInt8](data))
                }
            } catch let error as ConfigurationError {
                throw error
            } catch {
                throw ConfigurationError(variable: "TRUSTED_ROOTS", reason: "\(entry): \(error)")
            }
        }
        do {
            var configuration = try SignedPayloadVerifier.Configuration(apps: apps, trustedRoots: roots)
            configuration.onlineChecks = onlineRevocation.checks
            return configuration
        } catch {
            throw ConfigurationError(variable: "TRUSTED_ROOTS", reason: "\(error)")
        }
    }

    /// The PostgreSQL pool of a service (worker, customer API, console).
    public func postgresConfiguration() throws -> PostgresClient.Configuration {
        try Self.servicePool(url: postgresURL, connections: postgresPoolSize)
    }

    /// A pool of `connections` to `url` for a service (its `POSTGRES_URL` pool, the customer API's read pool, the
    /// webhooks service's, a read replica's). A service's statements are short (a customer read, a batch's writes, a
    /// timeline page): their connections run with `jit = off`. On a book of 10 million transactions the planner's
    /// estimates for the customer read (8 000 and 50 000 rows where an index probe finds 20) passed
    /// `jit_above_cost`, and compiling took 53 ms of a 72 ms read (EXPLAIN ANALYZE, docs/scale.md); the same read
    /// runs in a few milliseconds without it. `pipelinectl metrics`, whose scans are long, keeps the server's setting.
    public static func servicePool(url: String, connections: Int) throws -> PostgresClient.Configuration {
        var configuration = try PostgresClient.Configuration(url: url)
        configuration.options.maximumConnections = connections
        configuration.options.additionalStartupParameters.append(("jit", "off"))
        return configuration
    }
}
