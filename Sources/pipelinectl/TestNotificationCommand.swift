import AppStoreNotifications
import ArgumentParser
import Foundation
import AppStorePull
import ServiceRuntime

/// `pipelinectl test-notification`: the whole path checked in one command.
struct TestNotificationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test-notification",
        abstract: "Ask Apple for a TEST notification and follow it to PostgreSQL: Apple → ingest → Kafka → worker → database.",
        discussion: """
            Exit 0 with each hop's timing once the notification is in the ledger. Non-zero with Apple's send-attempt
            result (TIMED_OUT, TLS_ISSUE, UNSUCCESSFUL_HTTP_RESPONSE_CODE, …) when Apple could not reach ingest, or
            "sent but not stored" when ingest took it and no worker stored it before --timeout.
            """)

    @OptionGroup var appStore: AppStoreOptions
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "How long to wait in all (e.g. 2m, 90s).") var timeout = "2m"
    @Flag(help: "Print the report as JSON.") var json = false

    /// A trace of its own when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT): its records' handling joins it.
    func run() async throws { try await PipelineTracing.tracedCommand("pipelinectl test-notification", logger: toolLogger) { try await runTraced() } }

    func runTraced() async throws {
        let limit = try parseDuration(timeout, option: "--timeout")
        let api = try appStore.client()
        let operations = try connection.configuration()
        let quiet = json
        let report: TestNotificationCheck.Report
        do {
            report = try await operations.withStore(logger: toolLogger) { store in
                try await TestNotificationCheck(api: api, store: store, logger: toolLogger).run(bundleId: appStore.bundleId, timeout: .milliseconds(limit)) { line in
                    if !quiet { FileHandle.standardError.write(Data((line + "\n").utf8)) }
                }
            }
        } catch {
            await api.shutdown()
            throw error
        }
        await api.shutdown()
        func seconds(_ from: Int64?, _ to: Int64?) -> String {
            guard let from, let to else { return "?" }
            return String(format: "%.3fs", Double(to - from) / 1000)
        }
        let sentAt = report.sendAttempts.compactMap(\.attemptDate).max()
        let verdict: String
        switch report.outcome {
        case .stored: verdict = "stored"
        case .sendFailed(let result): verdict = "Apple could not deliver it to ingest: last send attempt \(result.rawValue)"
        case .sentButNotStored: verdict = "sent but not stored: ingest answered Apple, but no worker stored notification \(report.notificationUUID ?? "?") within \(timeout)"
        case .notSent: verdict = "Apple reported no send attempt within \(timeout)"
        }
        if json {
            printJSON(.object(JSONObject([
                "outcome": .string(verdict), "ok": .bool(report.outcome == .stored), "notificationUUID": jsonValue(report.notificationUUID),
                "testNotificationToken": jsonValue(report.testNotificationToken),
                "sendAttempts": .array(report.sendAttempts.map(\.json)),
                "requestedAt": jsonValue(Timestamp(millisecondsSince1970: report.requestedAt)), "sentAt": jsonValue(sentAt.map(Timestamp.init(millisecondsSince1970:))),
                "receivedAt": jsonValue(report.receivedAt.map(Timestamp.init(millisecondsSince1970:))), "storedAt": jsonValue(report.storedAt.map(Timestamp.init(millisecondsSince1970:))),
            ])))
        } else {
            print("test notification \(report.notificationUUID ?? "(none)"): \(verdict)")
            print("  requested → Apple sent:     \(seconds(report.requestedAt, sentAt))")
            print("  Apple sent → ingest took:   \(seconds(sentAt, report.receivedAt))")
            print("  ingest took → worker stored: \(seconds(report.receivedAt, report.storedAt))")
            print("  total:                      \(seconds(report.requestedAt, report.storedAt ?? report.finishedAt))")
        }
        guard report.outcome == .stored else { throw ExitCode(1) }
    }
}
