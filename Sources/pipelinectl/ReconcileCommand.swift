import AppStoreBudget
import AppStoreNotifications
import AppStoreServerAPI
import ArgumentParser
import EntitlementStore
import Foundation
import KafkaClient
import AppStorePull
import NotificationRecords
import ServiceRuntime
import Synchronization

/// Which subscriptions a pull command asks Apple about.
struct IdSelection: ParsableArguments {
    @Option(name: .customLong("transaction-id"), parsing: .upToNextOption, help: "Transaction ids (any of the customer's; original ones are best).")
    var transactionIds: [String] = []
    @Option(help: "A file of transaction ids, one a line (- for stdin).") var fromFile: String?

    func ids() throws -> [String] {
        var ids = transactionIds
        if let fromFile {
            let text: String
            if fromFile == "-" {
                text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
            } else {
                do { text = try String(contentsOfFile: fromFile, encoding: .utf8) } catch { throw ValidationError("--from-file \(UntrustedText.quoted(fromFile)) cannot be read") }
            }
            ids += text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") }
        }
        for id in ids where !id.allSatisfy({ $0.isASCII && ($0.isNumber || $0.isLetter || $0 == "-") }) || id.count > 64 {
            throw ValidationError("\(UntrustedText.quoted(id)) is not a transaction id")
        }
        var seen: Set<String> = []
        return ids.filter { seen.insert($0).inserted }
    }
}

/// Prints a pull summary: counts, unknown ids, and every row that changed.
func printPullSummary(_ summary: PullSummary, command: String, json: Bool) {
    func describe(_ row: EntitlementSummary?) -> JSONValue {
        guard let row else { return .null }
        return .object(JSONObject([
            "status": .string(row.status), "expiresAt": jsonValue(row.expiresAt.map(Timestamp.init(millisecondsSince1970:))), "productId": jsonValue(row.productId),
        ]))
    }
    if json {
        printJSON(.object(JSONObject([
            "run": jsonValue(summary.runId), "resumed": .bool(summary.resumed), "ids": jsonValue(summary.ids), "processed": jsonValue(summary.processed),
            "snapshots": jsonValue(summary.snapshots), "transactions": jsonValue(summary.transactions), "incompleteItems": jsonValue(summary.incompleteItems),
            "notApplied": jsonValue(summary.notApplied),
            "unknownIds": .array(summary.unknownIds.map { .object(JSONObject(["transactionId": .string($0.id), "errorCode": jsonValue($0.code)])) }),
            "changed": .array(summary.changes.map { change in
                .object(JSONObject(["originalTransactionId": .string(change.originalTransactionId), "before": describe(change.before), "after": describe(change.after)]))
            }),
        ])))
        return
    }
    func text(_ row: EntitlementSummary?) -> String {
        guard let row else { return "(none)" }
        return "\(row.status), expires \(row.expiresAt.map { Timestamp(millisecondsSince1970: $0).description } ?? "-"), \(row.productId ?? "-")"
    }
    print("\(command)\(summary.runId.map { " run \($0)" } ?? "")\(summary.resumed ? " (resumed)" : ""): \(summary.processed)/\(summary.ids) id(s), "
        + "\(summary.snapshots) status snapshot(s)\(command == "import" ? ", \(summary.transactions) transaction(s)" : ""), \(summary.changes.count) row(s) changed")
    for change in summary.changes { print("  \(change.originalTransactionId): \(text(change.before)) → \(text(change.after))") }
    for unknown in summary.unknownIds { print("  unknown to Apple: \(unknown.id) (\(unknown.code.map(String.init) ?? "?"))") }
    if summary.incompleteItems > 0 { print("  \(summary.incompleteItems) statuses item(s) without a signed transaction or status, left out") }
    if summary.erasedHeldBack > 0 { print("  \(summary.erasedHeldBack) record(s) about erased customers held back (not produced)") }
    if summary.notApplied > 0 { print("  \(summary.notApplied) snapshot(s) not yet stored by the workers when the wait ended (they will be; check `pipelinectl lag`)") }
}

/// Runs `body` with what every pull command needs: the API client, a producer, the store (migrated).
func withPullServices<T: Sendable>(
    appStore: AppStoreOptions, connection: ConnectionOptions, lane: AppStoreAPILane = .console,
    _ body: @Sendable (AppStoreServerAPIClient, PulledRecordProducer, EntitlementStore) async throws -> T
) async throws -> T {
    let operations = try connection.configuration()
    _ = try appStore.configuration()  // the key and settings are checked before anything starts
    var producerConfiguration = KafkaProducerConfiguration(client: try operations.requireKafka())
    producerConfiguration.deliveryTimeoutMilliseconds = 30_000
    let producer = try KafkaProducer(configuration: producerConfiguration, logger: toolLogger)
    do {
        let result = try await operations.withStore(logger: toolLogger) { store in
            let pending = try await store.pendingMigrations()
            guard pending.isEmpty else { throw ValidationError("the database lacks migration(s) \(pending.map(\.version)): run `pipelinectl migrate` first") }
            // Its calls take `lane`'s turns in the budget every process shares.
            let api = try appStore.client(budget: SharedRequestBudget(client: store.client, logger: toolLogger), lane: lane) { error, wait in
                FileHandle.standardError.write(Data("waiting \(wait) before retrying: \(error)\n".utf8))
            }
            do {
                let result = try await body(api, PulledRecordProducer(producer: producer, topic: operations.topic, erasures: store), store)
                await api.shutdown()
                return result
            } catch {
                await api.shutdown()
                throw error
            }
        }
        await producer.close()
        return result
    } catch {
        await producer.close()
        throw error
    }
}

/// `pipelinectl reconcile`.
struct ReconcileCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconcile",
        abstract: "Make entitlements agree with Apple: fetch each subscription's status and apply it through the workers.",
        discussion: """
            Get All Subscription Statuses for each id; every subscription in the answer goes to the notifications topic
            as a status snapshot, which the workers verify (every JWS, bound to your configured app) and apply through
            the state machine: Apple's status is the truth as of its signedDate, and a later notification still wins.
            Resumable like backfill; the summary lists the rows whose status, expiry or product changed, before → after.
            Run it after a long outage, and nightly with --stale (the reconcile CronJob).
            """)

    @OptionGroup var appStore: AppStoreOptions
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var selection: IdSelection
    @Flag(help: "Subscriptions whose expiry passed with no notification since (and, with --older-than, rows not updated that long).") var stale = false
    @Option(help: "With --stale: also rows not updated for this long (e.g. 30d).") var olderThan: String?
    @Flag(help: "Every subscription of the app in the database.") var all = false
    @Flag(help: "Rows that contradict Apple's last word (the workers heal them by themselves when they have an API key).") var contradicted = false
    @Option(help: "Subscriptions asked about at once (the shared App Store budget, not this, bounds the rate).") var concurrency = 8
    @Option(help: "How long to wait for the workers to apply the snapshots before comparing (e.g. 2m).") var wait = "2m"
    @Flag(help: "Start over instead of resuming an unfinished run with the same arguments.") var restart = false
    @Flag(help: "Print the summary as JSON.") var json = false

    func validate() throws {
        let chosen = [!selection.transactionIds.isEmpty || selection.fromFile != nil, stale, all, contradicted].filter { $0 }.count
        guard chosen == 1 else { throw ValidationError("choose one of --transaction-id/--from-file, --stale, --all, --contradicted") }
        if olderThan != nil, !stale { throw ValidationError("--older-than goes with --stale") }
    }

    /// A trace of its own when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT): its records' handling joins it.
    func run() async throws { try await PipelineTracing.tracedCommand("pipelinectl reconcile", logger: toolLogger) { try await runTraced() } }

    func runTraced() async throws {
        let environment = try appStore.resolvedEnvironment()
        let listed = try selection.ids()
        let waitMilliseconds = try parseDuration(wait, option: "--wait")
        let olderThanMilliseconds = try olderThan.map { try parseDuration($0, option: "--older-than") }
        let (stale, all, contradicted, restart, bundleId, concurrency) = (stale, all, contradicted, restart, appStore.bundleId, max(1, concurrency))
        let summary = try await withPullServices(appStore: appStore, connection: connection, lane: .sweep) { api, producer, store in
            let runKey = runDigest(erasureKey: store.erasureKey, api: api)
            let ids: [String]
            let key: String
            if stale {
                ids = try await store.staleSubscriptions(environment: environment.rawValue, bundleId: bundleId, notUpdatedForMilliseconds: olderThanMilliseconds)
                key = "stale|\(bundleId)|\(environment.rawValue)|\(olderThanMilliseconds ?? -1)|\(sweepDay())"
            } else if contradicted {
                ids = try await store.contradictedSubscriptions(environment: environment.rawValue, bundleId: bundleId)
                key = "contradicted|\(bundleId)|\(environment.rawValue)|\(runKey.hex(ids.joined(separator: ",")))"
            } else if all {
                ids = try await store.allSubscriptions(environment: environment.rawValue, bundleId: bundleId)
                key = "all|\(bundleId)|\(environment.rawValue)|\(sweepDay())"
            } else {
                ids = listed
                key = "ids|\(bundleId)|\(environment.rawValue)|\(runKey.hex(ids.joined(separator: ",")))"
            }
            let reconciler = StatusReconciler(api: api, producer: producer, store: store, logger: toolLogger, concurrency: concurrency)
            let line = ProgressThrottle()
            return try await reconciler.run(
                bundleId: bundleId, environment: environment, ids: ids, argumentsKey: key, restart: restart, wait: .milliseconds(waitMilliseconds)
            ) { progress in
                line.write("reconcile: \(progress.processed)/\(progress.ids) id(s), \(progress.snapshots) snapshot(s)\(pace(progress))", last: progress.processed == progress.ids)
            }
        }
        printPullSummary(summary, command: "reconcile", json: json)
    }
}

/// `pipelinectl import`.
struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Onboard existing subscribers: each customer's whole transaction history and current status, through the workers.",
        discussion: """
            For each transaction id (a file or stdin, one a line): every page of Get Transaction History v2 (each signed
            transaction goes to the topic as its own record kind and lands in `transactions`), then a status snapshot
            (so `entitlements` is current). Each customer's last revision is stored: importing the same ids again asks
            Apple only for what changed. Ids Apple does not know (4040010 and friends) are reported, not fatal.
            """)

    @OptionGroup var appStore: AppStoreOptions
    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var selection: IdSelection
    @Option(help: "How long to wait for the workers to apply the snapshots before comparing (e.g. 2m).") var wait = "2m"
    @Flag(help: "Start over instead of resuming an unfinished run with the same arguments.") var restart = false
    @Option(help: "Customers imported at once (the shared App Store budget, not this, bounds the rate).") var concurrency = 8
    @Flag(help: "Print the summary as JSON.") var json = false

    /// A trace of its own when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT): its records' handling joins it.
    func run() async throws { try await PipelineTracing.tracedCommand("pipelinectl import", logger: toolLogger) { try await runTraced() } }

    func runTraced() async throws {
        let environment = try appStore.resolvedEnvironment()
        let ids = try selection.ids()
        guard !ids.isEmpty else { throw ValidationError("give the ids to import: --transaction-id or --from-file") }
        let waitMilliseconds = try parseDuration(wait, option: "--wait")
        let (restart, bundleId, concurrency) = (restart, appStore.bundleId, max(1, concurrency))
        let summary = try await withPullServices(appStore: appStore, connection: connection, lane: .sweep) { api, producer, store in
            let key = "ids|\(bundleId)|\(environment.rawValue)|\(runDigest(erasureKey: store.erasureKey, api: api).hex(ids.joined(separator: ",")))"
            let importer = HistoryImporter(reconciler: StatusReconciler(api: api, producer: producer, store: store, logger: toolLogger, concurrency: concurrency))
            let line = ProgressThrottle()
            return try await importer.run(bundleId: bundleId, environment: environment, ids: ids, argumentsKey: key, restart: restart, wait: .milliseconds(waitMilliseconds)) {
                progress in
                line.write("import: \(progress.processed)/\(progress.ids) id(s), \(progress.transactions) transaction(s)\(pace(progress))", last: progress.processed == progress.ids)
            }
        }
        printPullSummary(summary, command: "import", json: json)
    }
}

/// The keyed digest pull runs and backfill runs are found again by (`KeyedDigest`): under the deployment's erasure
/// key when `ERASURE_KEY_FILE` is set, else under Apple's API key (a secret outside the database either way), so a
/// run's key never reverses into a customer's transaction ids.
/// ", 48.7 id(s)/s, about 3m 12s left": the run's pace so far (it takes what the App Store budget leaves).
func pace(_ summary: PullSummary) -> String {
    guard let rate = summary.idsPerSecond, let left = summary.secondsLeft else { return "" }
    let seconds = Int(left.rounded(.up))
    let time = seconds >= 3600 ? "\(seconds / 3600)h \(seconds % 3600 / 60)m" : seconds >= 60 ? "\(seconds / 60)m \(seconds % 60)s" : "\(seconds)s"
    return ", \(String(format: "%.1f", rate)) id(s)/s, about \(time) left"
}

/// Progress lines on stderr at most once a second (and the last one), so a run of thousands of ids a minute stays
/// readable.
final class ProgressThrottle: Sendable {
    private let last = Mutex<ContinuousClock.Instant?>(nil)

    func write(_ line: String, last final: Bool) {
        let now = ContinuousClock.now
        let due = last.withLock { last in
            guard final || last.map({ now - $0 >= .seconds(1) }) ?? true else { return false }
            last = now
            return true
        }
        if due { FileHandle.standardError.write(Data((line + "\n").utf8)) }
    }
}

/// The UTC day a sweep's order is computed for (`renewalOrder`): part of its run key, so a run resumes only under the
/// order it started with.
func sweepDay() -> String {
    String(Date().formatted(.iso8601.year().month().day()))
}

func runDigest(erasureKey: ErasureKey?, api: AppStoreServerAPIClient) -> KeyedDigest {
    runDigest(erasureKey: erasureKey, configuration: api.configuration)
}

func runDigest(erasureKey: ErasureKey?, configuration: AppStoreServerAPIConfiguration) -> KeyedDigest {
    if let key = erasureKey { return key.runDigest }
    return KeyedDigest(secret: Array(configuration.signingKey.rawRepresentation))
}
