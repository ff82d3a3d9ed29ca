import AppStoreNotifications
import EntitlementEvents
import Foundation
import KafkaClient
import PipelineConfiguration
import ServiceRuntime
import PostgresNIO
import SharedSettings

/// Everything the webhooks service (and `pipelinectl webhooks`) is configured with, from the environment.
package struct WebhooksConfiguration: Sendable {
    package var kafka: KafkaClientConfigurationValues
    /// `EVENTS_TOPIC`: the entitlement events the service delivers.
    package var eventsTopic = EventsConfiguration().topic
    /// `WEBHOOKS_GROUP_ID`: the consumer group of every webhooks process (they share the partitions).
    package var groupId = "webhooks"
    /// `WEBHOOKS_OPS_HOST` / `WEBHOOKS_OPS_PORT`: `/health/live`, `/health/ready`, `/metrics`.
    package var opsHost = "0.0.0.0"
    package var opsPort = 8084
    /// `WEBHOOK_TIMEOUT`: a 2xx within this is a success; anything else, or nothing, a failure.
    package var timeout: Duration = .seconds(10)
    /// `WEBHOOKS_ALLOW_PRIVATE_TARGETS`: deliver to loopback and private addresses (local compose, tests).
    package var allowPrivateTargets = false
    /// `WEBHOOK_RETRY_SCHEDULE`: the delay before each retry; after the last, the delivery is dead.
    package var retrySchedule: [Duration] = WebhooksConfiguration.defaultRetrySchedule
    /// `WEBHOOK_DISABLE_AFTER_FAILURES`: an endpoint is disabled after this many dead deliveries in a row.
    package var disableAfterFailures = 5
    /// `WEBHOOK_SECRET_ROTATION_OVERLAP`: how long the old secret keeps signing after `rotate-secret`.
    package var secretRotationOverlap: Duration = .seconds(24 * 3600)
    /// `WEBHOOK_DELIVERY_RETENTION`: finished deliveries (and their attempts) are pruned after this.
    package var deliveryRetention: Duration = .seconds(30 * 86_400)
    /// `WEBHOOKS_CONCURRENCY`: deliveries in flight per process (different subscriptions or endpoints).
    package var concurrency = 16
    /// `WEBHOOKS_MAX_IN_FLIGHT_PER_ENDPOINT`: deliveries one endpoint may have in flight across every process, so a
    /// slow endpoint cannot take every slot.
    package var maximumInFlightPerEndpoint = 8
    /// `WEBHOOKS_POLL_INTERVAL`: how often a process looks for due deliveries when it found none.
    package var pollInterval: Duration = .milliseconds(200)
    /// `WEBHOOKS_STORE_TIMEOUT`: the longest a database step (claim, record, enqueue) may take. A query on a
    /// connection the server dropped (an immediate PostgreSQL restart) can otherwise wait for good, and the loop
    /// awaiting it would stop delivering (seen in a chaos run: claims stopped after a restart, silently).
    package var storeTimeout: Duration = .seconds(15)
    /// `POSTGRES_URL`, `POSTGRES_POOL_SIZE`.
    package var postgresURL = ""
    package var postgresPoolSize = 8
    /// `ERASURE_KEY_FILE` / `ERASURE_KEY`: the workers' erasure key, so an erased customer's events read again from the
    /// topic make no delivery (docs/privacy.md). Needed once erasures exist.
    package var erasureKey: ErasureKey?

    /// 5 s, 5 min, 30 min, 2 h, 5 h, then 10 h five times and 14 h: about three days (71.6 h) in all, like the
    /// hosted services' schedules, each delay with ±20 % jitter.
    package static let defaultRetrySchedule: [Duration] = ["5s", "5m", "30m", "2h", "5h", "10h", "10h", "10h", "10h", "10h", "14h"].map {
        .milliseconds(DurationText.milliseconds($0)!)
    }

    package init(kafka: KafkaClientConfigurationValues) {
        self.kafka = kafka
    }

    /// The webhooks service's own settings, each described once: the parser below, `webhooks --help` and
    /// docs/webhooks.md's table read these (`pipelinectl webhooks` reads three of them too).
    enum Settings {
        static let groupId = Setting.string("WEBHOOKS_GROUP_ID", default: "webhooks", "the consumer group every webhooks process joins (they share the partitions)")
        static let ops = OpsListenerSettings(prefix: "WEBHOOKS", port: 8084)
        static let (opsHost, opsPort) = (ops.host, ops.port)
        static let timeout = Setting.duration(
            "WEBHOOK_TIMEOUT", default: .seconds(10), range: .milliseconds(100) ... .seconds(300), deprecatedMilliseconds: "WEBHOOK_TIMEOUT_MS",
            "a 2xx within this is a success; anything else, or nothing, a failure")
        static let allowPrivateTargets = Setting.bool(
            "WEBHOOKS_ALLOW_PRIVATE_TARGETS", default: false, "deliver to loopback and private addresses (tests, local compose; also read by `pipelinectl webhooks add`)")
        static let retrySchedule = Setting<[Duration]>(
            SettingDescription(
                variable: "WEBHOOK_RETRY_SCHEDULE", summary: "delays before each retry, ±20 % jitter; after the last the delivery is dead (about 3 days; `1s,1s,1s` in tests)",
                defaultText: "5s,5m,30m,2h,5h,10h,10h,10h,10h,10h,14h")
        ) { environment throws(ConfigurationError) in
            guard let text = environment.optionalString("WEBHOOK_RETRY_SCHEDULE") else { return WebhooksConfiguration.defaultRetrySchedule }
            let delays = text.split(separator: ",").map { DurationText.milliseconds($0.trimmingCharacters(in: .whitespaces)) }
            guard !delays.isEmpty, delays.allSatisfy({ ($0 ?? 0) > 0 }) else {
                throw ConfigurationError(variable: "WEBHOOK_RETRY_SCHEDULE", reason: "\(UntrustedText.quoted(text, limit: 200)) is not a comma-separated list of durations (5s,5m,30m,2h)")
            }
            return delays.map { .milliseconds($0!) }
        }
        static let disableAfterFailures = Setting.int(
            "WEBHOOK_DISABLE_AFTER_FAILURES", default: 5, range: 1...10_000, "dead deliveries in a row that disable an endpoint")
        static let secretRotationOverlap = Setting.duration(
            "WEBHOOK_SECRET_ROTATION_OVERLAP", default: .seconds(24 * 3600), "how long the old secret keeps signing after `rotate-secret` (read by pipelinectl)")
        static let deliveryRetention = Setting.duration(
            "WEBHOOK_DELIVERY_RETENTION", default: .seconds(30 * 86_400), "finished deliveries and their attempts are pruned after this")
        static let concurrency = Setting.int("WEBHOOKS_CONCURRENCY", default: 16, range: 1...256, "attempts in flight per process (different subscriptions or endpoints)")
        static let maximumInFlightPerEndpoint = Setting.int(
            "WEBHOOKS_MAX_IN_FLIGHT_PER_ENDPOINT", default: 8, range: 1...256,
            "attempts one endpoint may have in flight, every process together, so a slow endpoint cannot take every slot")
        static let pollInterval = Setting.duration(
            "WEBHOOKS_POLL_INTERVAL", default: .milliseconds(200), range: .milliseconds(10) ... .seconds(60), deprecatedMilliseconds: "WEBHOOKS_POLL_INTERVAL_MS",
            "how often due deliveries are looked for when none were")
        static let storeTimeout = Setting.duration(
            "WEBHOOKS_STORE_TIMEOUT", default: .seconds(15), range: .seconds(1) ... .seconds(600), deprecatedMilliseconds: "WEBHOOKS_STORE_TIMEOUT_MS",
            "the longest a database step (claim, record, enqueue) may take before it is retried: a query on a connection PostgreSQL dropped can otherwise wait for good")
        static let postgresPoolSize = Setting.int("POSTGRES_POOL_SIZE", default: 8, range: 1...100, "connections to `POSTGRES_URL` (required) per process")

        static let catalog = SettingsCatalog(component: "webhooks", settings: [
            groupId.description, opsHost.description, opsPort.description, timeout.description, allowPrivateTargets.description,
            retrySchedule.description, disableAfterFailures.description, secretRotationOverlap.description, deliveryRetention.description,
            concurrency.description, maximumInFlightPerEndpoint.description, pollInterval.description, storeTimeout.description,
            postgresPoolSize.description,
        ])
    }

    /// The webhooks service's own settings, for `--help`, the docs and `pipelinectl settings webhooks`.
    package static var catalog: SettingsCatalog { Settings.catalog }

    package static let environmentKeys = Settings.catalog.environmentKeys
        + ["EVENTS_TOPIC", "POSTGRES_URL", SettingDescription.logLevel.variable, "ERASURE_KEY_FILE", "ERASURE_KEY"] + KafkaEnvironment.keys

    package static func fromEnvironment(_ environment: EnvironmentReader = EnvironmentReader()) throws(ConfigurationError) -> WebhooksConfiguration {
        var configuration = try toolSettings(environment, kafka: try KafkaEnvironment.client(environment, defaultClientId: "appstore-webhooks"))
        configuration.eventsTopic = environment.string("EVENTS_TOPIC", default: configuration.eventsTopic)
        configuration.groupId = try Settings.groupId.read(environment)
        configuration.opsHost = try Settings.opsHost.read(environment)
        configuration.opsPort = try Settings.opsPort.read(environment)
        configuration.retrySchedule = try Settings.retrySchedule.read(environment)
        configuration.disableAfterFailures = try Settings.disableAfterFailures.read(environment)
        configuration.deliveryRetention = try Settings.deliveryRetention.read(environment)
        configuration.erasureKey = try PipelineSettings.erasureKey(environment)
        configuration.concurrency = try Settings.concurrency.read(environment)
        configuration.maximumInFlightPerEndpoint = try Settings.maximumInFlightPerEndpoint.read(environment)
        configuration.pollInterval = try Settings.pollInterval.read(environment)
        configuration.storeTimeout = try Settings.storeTimeout.read(environment)
        configuration.postgresURL = try environment.required("POSTGRES_URL")
        configuration.postgresPoolSize = try Settings.postgresPoolSize.read(environment)
        return configuration
    }

    /// What `pipelinectl webhooks` reads (it needs no broker for most commands): the private-target rule, the
    /// rotation overlap and the timeout, with the service's defaults.
    package static func toolSettings(
        _ environment: EnvironmentReader, kafka: KafkaClientConfigurationValues = KafkaClientConfigurationValues(bootstrapServers: [], clientId: "pipelinectl")
    ) throws(ConfigurationError) -> WebhooksConfiguration {
        var configuration = WebhooksConfiguration(kafka: kafka)
        configuration.allowPrivateTargets = try Settings.allowPrivateTargets.read(environment)
        configuration.secretRotationOverlap = try Settings.secretRotationOverlap.read(environment)
        configuration.timeout = try Settings.timeout.read(environment)
        return configuration
    }

    /// The delay before retry number `attempt` (1-based) with ±20 % jitter, or nil when the schedule is exhausted.
    package func retryDelay(afterAttempt attempt: Int) -> Duration? {
        guard attempt >= 1, attempt <= retrySchedule.count else { return nil }
        return retrySchedule[attempt - 1] * Double.random(in: 0.8...1.2)
    }

    /// What an attempt's answer leads to: a 2xx is delivered; 410 Gone disables the endpoint at once; any other
    /// failure is retried on the schedule (a 429's or 503's `Retry-After` replaces the step's delay, bounded by the
    /// schedule's longest step) until the schedule is exhausted, then dead.
    package func outcome(of attempt: WebhookAttempt, attempts before: Int, now: Date = Date()) -> DeliveryOutcome {
        if attempt.succeeded { return .delivered }
        if attempt.status == 410 { return .gone(reason: "the receiver answered 410 Gone: it asks not to be sent anything more (enable to deliver again)") }
        guard var delay = retryDelay(afterAttempt: before + 1) else { return .dead(disableAfter: disableAfterFailures) }
        if let retryAfter = attempt.retryAfter { delay = min(retryAfter, retrySchedule.max() ?? retryAfter) }
        return .retry(at: now.addingTimeInterval(Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18))
    }

    package var consumerConfiguration: KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(client: kafka.clientConfiguration, groupId: groupId)
    }

    package func postgresConfiguration() throws -> PostgresClient.Configuration {
        try PipelineSettings.servicePool(url: postgresURL, connections: postgresPoolSize)
    }

    /// `webhooks --help`.
    package static let help = """
        webhooks: delivers entitlement events to registered HTTP endpoints (Standard Webhooks). Configured by the environment
        (durations as 500ms, 10s, 5m). Its own settings:
        \(Settings.catalog.helpLines)
        And those it shares with the other services:
        \(KafkaEnvironment.catalog.helpLines)
          EVENTS_TOPIC                     the events to deliver (appstore.entitlement-events.v1)
          POSTGRES_URL                     the database (required)
          ERASURE_KEY_FILE, ERASURE_KEY    the workers' erasure key: an erased customer's events make no delivery (docs/privacy.md)
          LOG_LEVEL                        trace, debug, info (default), notice, warning, error, critical
        Endpoints: pipelinectl webhooks add --url U [--bundle-id B]... [--environment E] [--type T]... [--allow-http]. docs/webhooks.md.
        """
}
