import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import Foundation
import Logging
import PipelineConfiguration
import PipelineOperations

/// Where the pipeline is: the services' own environment variables, overridable per run.
struct ConnectionOptions: ParsableArguments {
    @Option(help: "Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS).")
    var bootstrapServers: String?

    @Option(help: "PostgreSQL URL (default: $POSTGRES_URL).")
    var postgresUrl: String?

    @Option(help: "The notifications topic (default: $NOTIFICATIONS_TOPIC or appstore.notifications.v2).")
    var topic: String?

    @Option(help: "The dead-letter topic (default: $DEAD_LETTER_TOPIC or the topic + .dead-letter).")
    var deadLetterTopic: String?

    /// Runs `body` with a store on `--postgres-url` whose schema is current (else the error says to migrate).
    func withMigratedStore<T: Sendable>(_ body: @Sendable (EntitlementStore) async throws -> T) async throws -> T {
        try await configuration().withStore(logger: toolLogger) { store in
            try await requireMigrated(store)
            return try await body(store)
        }
    }

    func configuration() throws -> OperationsConfiguration {
        var environment = ProcessInfo.processInfo.environment
        if let bootstrapServers { environment["KAFKA_BOOTSTRAP_SERVERS"] = bootstrapServers }
        if let postgresUrl { environment["POSTGRES_URL"] = postgresUrl }
        if let topic { environment["NOTIFICATIONS_TOPIC"] = topic }
        if let deadLetterTopic { environment["DEAD_LETTER_TOPIC"] = deadLetterTopic }
        return try OperationsConfiguration.fromEnvironment(EnvironmentReader(environment))
    }
}

/// pipelinectl's own log lines (librdkafka and postgres-nio warnings) go to stderr; results go to stdout.
let toolLogger: Logger = {
    LoggingSystem.bootstrap(StreamLogHandler.standardError)
    var logger = Logger(label: "pipelinectl")
    logger.logLevel = Logger.Level(rawValue: ProcessInfo.processInfo.environment["LOG_LEVEL"] ?? "") ?? .error
    return logger
}()

/// Prints one JSON document on stdout.
func printJSON(_ value: JSONValue) {
    print(value.serialized)
}

/// What a command created, with a secret shown once: `object` as JSON with `--json`, else `summary` and the secret
/// on a line of its own that says it will not be shown again.
func printCreated(json: Bool, _ object: JSONObject, summary: String, secret: (label: String, value: String)) {
    if json { return printJSON(.object(object)) }
    print(summary)
    print("\(secret.label) (shown once): \(secret.value)")
}

/// What a `list` command reads: the connection, and whether to print JSON.
struct ListingOptions: ParsableArguments {
    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "Print JSON.") var json = false

    /// Reads the rows with a migrated store, then prints them: a JSON array of `object`s with `--json`, else
    /// `header` (when there is one) and a `line` per row, or `empty` when there is none.
    func list<Row: Sendable>(
        header: String? = nil, empty: String? = nil, _ read: @Sendable (EntitlementStore) async throws -> [Row], object: (Row) -> JSONObject, line: (Row) -> String
    ) async throws {
        let rows = try await connection.withMigratedStore { store in try await read(store) }
        if json { return printJSON(.array(rows.map { .object(object($0)) })) }
        if let header { print(header) }
        for row in rows { print(line(row)) }
        if rows.isEmpty, let empty { print(empty) }
    }
}

/// A time as the listings print it (RFC 3339 with milliseconds), `-` for none.
func listedTime(_ date: Date?) -> String { date.map { Timestamp($0).rfc3339Milliseconds } ?? "-" }

func jsonValue(_ string: String?) -> JSONValue { string.map { .string($0) } ?? .null }
func jsonValue<I: BinaryInteger>(_ value: I?) -> JSONValue { value.map { .number(JSONNumber(Int64($0))) } ?? .null }
func jsonValue(_ date: Date?) -> JSONValue { date.map { .string($0.formatted(.iso8601)) } ?? .null }
func jsonValue(_ timestamp: Timestamp?) -> JSONValue { timestamp.map { .string($0.date.formatted(.iso8601)) } ?? .null }

/// Counts, rate and ETA on stderr for long runs, at most twice a second.
final class ProgressLine: @unchecked Sendable {
    let label: String
    let started = ContinuousClock.now
    var last = ContinuousClock.now - .seconds(1)
    let enabled: Bool

    init(_ label: String, enabled: Bool = isatty(STDERR_FILENO) == 1) {
        self.label = label
        self.enabled = enabled
    }

    func update(_ done: Int, of total: Int64) {
        guard enabled, ContinuousClock.now - last > .milliseconds(500) || Int64(done) >= total else { return }
        last = ContinuousClock.now
        let seconds = max(0.001, Double((ContinuousClock.now - started).components.attoseconds) / 1e18 + Double((ContinuousClock.now - started).components.seconds))
        let rate = Double(done) / seconds
        let eta = rate > 0 ? Double(total - Int64(done)) / rate : 0
        FileHandle.standardError.write(Data(String(format: "\r%@: %d/%lld  %.0f/s  ETA %.0fs   ", label, done, total, rate, eta).utf8))
        if Int64(done) >= total { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

/// "2026-11-20T10:00:00Z" (or with fractional seconds) as milliseconds since 1970.
func parseISO8601(_ text: String) throws -> Int64 {
    let formats: [Date.ISO8601FormatStyle] = [.iso8601, Date.ISO8601FormatStyle(includingFractionalSeconds: true)]
    for format in formats {
        if let date = try? format.parse(text) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
    }
    throw ValidationError("\"\(text)\" is not an ISO-8601 time such as 2026-11-20T10:00:00Z")
}

/// A refusal at run time that names what was not found or not allowed: one line on stderr, exit 1 (a
/// `ValidationError` is for the words of the call, and prints the usage with exit 64).
struct ToolFailure: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}
