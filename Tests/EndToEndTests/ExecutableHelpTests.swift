import Foundation
import PipelineTestSupport
import Testing

/// The first thing a person types (issue 51: `worker --help` printed a critical configuration error without
/// KAFKA_BOOTSTRAP_SERVERS): every executable answers `--help` with an empty environment, exit 0, naming itself.
@Suite("Every executable's --help works with an empty environment")
struct ExecutableHelpTests {
    @Test("ingest, worker, customer-api, webhooks, console, pipelinectl, fake-appstore-api, demo-notifications")
    func help() async throws {
        for name in ["ingest", "worker", "customer-api", "webhooks", "console", "pipelinectl", "fake-appstore-api", "demo-notifications"] {
            let process = Process()
            process.executableURL = repositoryRoot.appendingPathComponent(".build/debug/\(name)")
            process.arguments = ["--help"]
            process.environment = [:]
            process.currentDirectoryURL = FileManager.default.temporaryDirectory
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(name) --help: exit \(process.terminationStatus): \(text.prefix(300))")
            #expect(text.contains(name == "pipelinectl" ? "OVERVIEW" : name) && !text.contains("critical appstore-"), "\(name) --help: \(text.prefix(300))")
        }
    }
}
