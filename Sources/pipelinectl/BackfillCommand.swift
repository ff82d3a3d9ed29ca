import AppStoreBudget
import AppStoreNotifications
import EntitlementStore
import AppStoreServerAPI
import ArgumentParser
import Foundation
import KafkaClient
import AppStorePull
import PipelineConfiguration
import ServiceRuntime
import SharedSettings

/// The App Store Server API settings every pull command takes: the `APPSTORE_*` variables, per environment.
struct AppStoreOptions: ParsableArguments {
    @Option(
        name: .customLong("bundle-id"),
        help: "Your app's bundle id (the JWT's bid claim, and the app whose data is read; default: $APPSTORE_BUNDLE_ID, or the one app of $APPS).")
    var bundleIdOption: String?
    @Option(name: .customLong("environment"), help: "Production or Sandbox (default: $APPSTORE_ENVIRONMENT, or Production).")
    var environmentOption: String?

    /// `--bundle-id`, else `APPSTORE_BUNDLE_ID`, else the only app `APPS` lists ("" when none decides: `validate` refuses).
    var bundleId: String {
        if let bundleIdOption { return bundleIdOption }
        let environment = ProcessInfo.processInfo.environment
        if let bundleId = environment["APPSTORE_BUNDLE_ID"], !bundleId.isEmpty { return bundleId }
        if let text = environment["APPS"], let apps = try? PipelineSettings.parseApps(text), apps.count == 1, let only = apps[0].bundleId { return only }
        return ""
    }

    /// `--environment`, else `APPSTORE_ENVIRONMENT`, else Production.
    var environment: String { environmentOption ?? ProcessInfo.processInfo.environment["APPSTORE_ENVIRONMENT"].flatMap { $0.isEmpty ? nil : $0 } ?? "Production" }

    func validate() throws {
        guard !bundleId.isEmpty else {
            throw ValidationError("--bundle-id is required: APPSTORE_BUNDLE_ID is unset and APPS does not name exactly one app")
        }
    }

    func resolvedEnvironment() throws -> Environment {
        guard let environment = Environment.allCases.first(where: { $0.rawValue.lowercased() == environment.lowercased() }),
            environment == .production || environment == .sandbox
        else { throw ValidationError("--environment must be Production or Sandbox, not \(UntrustedText.quoted(environment))") }
        return environment
    }

    /// A client configured from APPSTORE_KEY_ID, APPSTORE_ISSUER_ID, APPSTORE_PRIVATE_KEY_FILE, APPSTORE_API_BASE_URL,
    /// APPSTORE_API_RATE; its calls take their turns in `budget` (the shared one, where the command has the database),
    /// in `lane`.
    func client(
        budget: (any AppStoreRequestBudget)? = nil, lane: AppStoreAPILane = .console,
        onRetry: @escaping @Sendable (AppStoreServerAPIError, Duration) -> Void = { _, _ in }
    ) throws -> AppStoreServerAPIClient {
        let configuration = try configuration()
        return AppStoreServerAPIClient(configuration: configuration, logger: toolLogger, budget: budget, defaultLane: lane, onRetry: onRetry)
    }

    /// The client's configuration from the `APPSTORE_*` variables.
    func configuration() throws -> AppStoreServerAPIConfiguration {
        let environment = try resolvedEnvironment()
        do {
            return try AppStoreServerAPIConfiguration.fromEnvironment(ProcessInfo.processInfo.environment, environment: environment)
        } catch {
            throw ValidationError(error.description)
        }
    }
}

/// `pipelinectl backfill`: what Apple sent but the pipeline never stored, pulled from Get Notification History.
struct BackfillCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backfill",
        abstract: "Fetch Apple's notification history and produce it to the notifications topic, as ingest would.",
        discussion: """
            Every signedPayload Apple returns is produced with ingest's key rule and settings (acks=all, idempotent),
            headers received-at, source: history and send-attempt-result. The workers verify and deduplicate as
            always, so overlapping what is stored is harmless. Progress is checkpointed in PostgreSQL after each
            page the broker acknowledged: rerun the same command after a crash and it continues; --restart starts over.
            Apple keeps 180 days of history in Production and 30 in Sandbox.
            With --follow it runs for ever: every --every it backfills --only-failures over the last --lookback,
            so what Apple could not deliver during an ingest outage arrives with no operator.
            """)

    @OptionGroup var appStore: AppStoreOptions
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "Start of the window: ISO-8601 (2026-11-20T10:00:00Z) or relative (3d, 12h, 30m).") var since: String?
    @Option(help: "End of the window (default: now).") var until: String?
    @Flag(help: "Only notifications whose delivery to your server failed.") var onlyFailures = false
    @Option(name: .customLong("type"), help: "Only this notificationType, or TYPE/SUBTYPE.") var notificationType: String?
    @Option(help: "Only notifications of this customer's transactions (any transaction id of theirs).") var transactionId: String?
    @Flag(help: "Fetch and count; produce and checkpoint nothing.") var dryRun = false
    @Flag(help: "Start over instead of resuming an unfinished run with the same arguments.") var restart = false
    @Flag(help: "Print the summary as JSON.") var json = false
    @Flag(help: "Keep running: backfill --only-failures over --lookback every --every.") var follow = false
    @Option(help: "With --follow: how often (e.g. 15m).") var every = "15m"
    @Option(help: "With --follow: how far back each pass reads (e.g. 3d).") var lookback = "3d"

    func validate() throws {
        if !follow, since == nil { throw ValidationError("--since is required (or --follow)") }
        if follow, since != nil || until != nil { throw ValidationError("--follow reads the last --lookback; it takes no --since/--until") }
        if notificationType != nil, transactionId != nil { throw ValidationError("--type and --transaction-id cannot be combined (Apple refuses both at once)") }
    }

    /// A trace of its own when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT): its records' handling joins it.
    func run() async throws { try await PipelineTracing.tracedCommand("pipelinectl backfill", logger: toolLogger) { try await runTraced() } }

    func runTraced() async throws {
        let environment = try appStore.resolvedEnvironment()
        let operations = try connection.configuration()
        let progress = BackfillProgressLine()
        let parsedType = try notificationType.map(Self.parseType)
        let producer: KafkaProducer? = try dryRun ? nil : {
            // Ingest's settings (acks=all, idempotent); a longer delivery timeout, as no HTTP caller waits on it.
            var producerConfiguration = KafkaProducerConfiguration(client: try operations.requireKafka())
            producerConfiguration.deliveryTimeoutMilliseconds = 30_000
            return try KafkaProducer(configuration: producerConfiguration, logger: toolLogger)
        }()
        let digest = runDigest(erasureKey: operations.erasureKey, configuration: try appStore.configuration())
        let request = { @Sendable (start: Int64, end: Int64, onlyFailures: Bool, key: String) -> BackfillRequest in
            var request = BackfillRequest(bundleId: appStore.bundleId, environment: environment, startDate: start, endDate: end, argumentsKey: key)
            request.identifierDigest = digest
            request.onlyFailures = onlyFailures
            request.notificationType = parsedType?.type
            request.notificationSubtype = parsedType?.subtype
            request.transactionId = transactionId
            return request
        }
        do {
            try await operations.withStore(logger: toolLogger) { store in
                // Its calls take the backfill lane's turns in the budget every process shares.
                let api = try appStore.client(budget: SharedRequestBudget(client: store.client, logger: toolLogger), lane: .backfill) { error, wait in
                    progress.note("waiting \(wait) before retrying: \(error)")
                }
                do {
                    try await backfill(store: store, api: api, producer: producer, environment: environment, progress: progress, request: request)
                } catch {
                    await api.shutdown()
                    throw error
                }
                await api.shutdown()
            }
        } catch {
            await producer?.close()
            throw error
        }
        await producer?.close()
    }

    func backfill(
        store: EntitlementStore, api: AppStoreServerAPIClient, producer: KafkaProducer?, environment: Environment, progress: BackfillProgressLine,
        request: @escaping @Sendable (Int64, Int64, Bool, String) -> BackfillRequest
    ) async throws {
                let pending = try await store.pendingMigrations()
                guard pending.isEmpty else { throw ValidationError("the database lacks migration(s) \(pending.map(\.version)): run `pipelinectl migrate` first") }
                let operations = try connection.configuration()
                let backfill = NotificationBackfill(api: api, producer: producer, store: store, topic: operations.topic, logger: toolLogger)
                if follow {
                    let interval = try parseDuration(every, option: "--every")
                    let window = try parseDuration(lookback, option: "--lookback")
                    let key = "follow|\(appStore.bundleId)|\(environment.rawValue)|lookback=\(lookback)|type=\(notificationType ?? "")|transaction=\(transactionId ?? "")"
                    while true {
                        let now = Int64(Date().timeIntervalSince1970 * 1000)
                        let started = ContinuousClock.now
                        do {
                            let summary = try await backfill.run(request(now - window, now, true, key)) { progress.update($0) }
                            report(summary)
                        } catch let error as CancellationError {
                            throw error
                        } catch {
                            // A pass that failed is resumed by the next one (its checkpoint is intact).
                            FileHandle.standardError.write(Data("backfill pass failed, next pass in \(every): \(error)\n".utf8))
                        }
                        let elapsed = ContinuousClock.now - started
                        try await Task.sleep(for: max(.seconds(1), .milliseconds(interval) - elapsed))
                    }
                }
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let start = try parseTime(since!, now: now, option: "--since")
                let end = try until.map { try parseTime($0, now: now, option: "--until") } ?? now
                let key = [
                    "bundle=\(appStore.bundleId)", "environment=\(environment.rawValue)", "since=\(since!)", "until=\(until ?? "now")",
                    "onlyFailures=\(onlyFailures)", "type=\(notificationType ?? "")", "transaction=\(transactionId ?? "")",
                ].joined(separator: "|")
                let summary = try await backfill.run(request(start, end, onlyFailures, key), restart: restart) { progress.update($0) }
                report(summary)
    }

    func report(_ summary: BackfillSummary) {
        if json {
            printJSON(.object(JSONObject([
                "run": jsonValue(summary.runId), "resumed": .bool(summary.resumed), "completed": .bool(summary.completed), "dryRun": .bool(dryRun),
                "pages": jsonValue(summary.counts.pages), "fetched": jsonValue(summary.counts.fetched), "produced": jsonValue(summary.counts.produced),
                "alreadyInLedger": jsonValue(summary.counts.alreadyStored), "new": jsonValue(summary.counts.newNotifications),
                "unknownSendAttemptResults": jsonValue(summary.unknownSendAttemptResults),
                "erasedHeldBack": jsonValue(summary.erasedHeldBack),
                "windowStart": jsonValue(summary.window.map { Timestamp(millisecondsSince1970: $0.lowerBound) }),
                "windowEnd": jsonValue(summary.window.map { Timestamp(millisecondsSince1970: $0.upperBound) }),
            ])))
            return
        }
        let window = summary.window.map { " over \(Timestamp(millisecondsSince1970: $0.lowerBound)) … \(Timestamp(millisecondsSince1970: $0.upperBound))" } ?? ""
        print("backfill\(summary.runId.map { " run \($0)" } ?? "")\(summary.resumed ? " (resumed)" : "")\(dryRun ? " (dry run)" : "")\(window): "
            + "\(summary.counts.pages) page(s), fetched \(summary.counts.fetched), produced \(summary.counts.produced), already in the ledger \(summary.counts.alreadyStored), new \(summary.counts.newNotifications)"
            + (summary.unknownSendAttemptResults > 0 ? ", \(summary.unknownSendAttemptResults) unknown send-attempt result(s) kept raw" : "")
            + (summary.erasedHeldBack > 0 ? ", \(summary.erasedHeldBack) about erased customers held back" : ""))
    }

    static func parseType(_ text: String) throws -> (type: String, subtype: String?) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard (1...2).contains(parts.count), parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isUppercase || $0 == "_" || $0.isNumber } }) else {
            throw ValidationError("--type must be TYPE or TYPE/SUBTYPE in Apple's spelling (e.g. DID_RENEW, SUBSCRIBED/RESUBSCRIBE), not \(UntrustedText.quoted(text))")
        }
        return (parts[0], parts.count == 2 ? parts[1] : nil)
    }
}

/// Pages, records, rate and ETA on stderr, one line rewritten in place on a terminal, a line per page elsewhere.
final class BackfillProgressLine: @unchecked Sendable {
    let started = ContinuousClock.now
    let terminal = isatty(STDERR_FILENO) == 1
    let lock = NSLock()

    func update(_ summary: BackfillSummary) {
        lock.lock()
        defer { lock.unlock() }
        let elapsed = ContinuousClock.now - started
        let seconds = max(0.001, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        var line = "backfill: \(summary.counts.pages) page(s), \(summary.counts.fetched) notification(s), \(String(format: "%.1f", Double(summary.counts.produced) / seconds))/s produced"
        if let window = summary.window, let reached = summary.reachedDate, window.upperBound > window.lowerBound, !summary.completed {
            let done = Double(reached - window.lowerBound) / Double(window.upperBound - window.lowerBound)
            if done > 0.01 { line += String(format: ", %.0f%% of the window, ETA %.0fs", done * 100, seconds / done - seconds) }
        }
        FileHandle.standardError.write(Data((terminal ? "\r" + line + "   " : line + "\n").utf8))
    }

    func note(_ text: String) {
        lock.lock()
        defer { lock.unlock() }
        FileHandle.standardError.write(Data(((terminal ? "\n" : "") + text + "\n").utf8))
    }
}

/// ISO-8601, or a time relative to `now` ("3d", "12h", "30m", "45s" ago).
func parseTime(_ text: String, now: Int64, option: String) throws -> Int64 {
    if let relative = try? parseDuration(text, option: option) { return now - relative }
    do {
        return try parseISO8601(text)
    } catch {
        throw ValidationError("\(option) \(UntrustedText.quoted(text)) is neither an ISO-8601 time (2026-11-20T10:00:00Z) nor relative (3d, 12h, 30m)")
    }
}

/// "15m", "3d", "12h", "45s", "2w" as milliseconds.
func parseDuration(_ text: String, option: String) throws -> Int64 {
    guard let milliseconds = DurationText.milliseconds(text) else {
        throw ValidationError("\(option) \(UntrustedText.quoted(text)) is not a duration such as 15m, 12h, 3d")
    }
    return milliseconds
}
