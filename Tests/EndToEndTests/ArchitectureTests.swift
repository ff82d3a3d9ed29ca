import Console
import CustomerAPI
import EntitlementEvents
import Foundation
import KafkaClient
import NotificationIngest
import NotificationWorker
import PipelineConfiguration
import PipelineTestSupport
import SharedSettings
import Testing
import Webhooks

/// The rules docs/architecture.md states, held against the tree: the module graph on that page is the one the code's
/// imports draw, and every import of one of our modules is used (the build's import check covers "declared").
@Suite("The module graph and imports")
struct ArchitectureTests {
    /// Runs `script` (a Python program of scripts/) with `arguments`: its exit status and what it printed.
    func run(_ script: String, _ arguments: [String] = [], root: URL = repositoryRoot) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", root.appendingPathComponent("scripts/\(script)").path] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    @Test("docs/architecture.md's module graph is the code's")
    func graphMatchesTheCode() throws {
        let result = try run("architecture.py", ["--check"])
        #expect(result.status == 0, "\(result.output)")
    }

    @Test("every import of one of this package's modules is used")
    func importsAreUsed() throws {
        let result = try run("check-imports.py")
        #expect(result.status == 0, "\(result.output)")
    }

    @Test("both checks fail on a tree that breaks them: a new import, an import nothing uses")
    func checksCanFail() throws {
        // A copy of what the scripts read (Sources, Tests, docs/architecture.md, the scripts), with one file changed.
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("architecture-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: copy) }
        for item in [
            "Sources", "Tests", "docs/architecture.md", "scripts/architecture.py", "scripts/check-imports.py", "scripts/swift_sources.py",
        ] {
            let target = copy.appendingPathComponent(item)
            try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: repositoryRoot.appendingPathComponent(item), to: target)
        }
        #expect(try run("architecture.py", ["--check"], root: copy).status == 0)
        let file = copy.appendingPathComponent("Sources/PipelineConfiguration/DurationText.swift")
        let text = try String(contentsOf: file, encoding: .utf8)
        try ("import KafkaClient\n" + text).write(to: file, atomically: true, encoding: .utf8)
        let drifted = try run("architecture.py", ["--check"], root: copy)
        #expect(drifted.status == 1 && drifted.output.contains("PipelineConfiguration"), "\(drifted.output)")
        let unused = try run("check-imports.py", root: copy)
        #expect(unused.status == 1 && unused.output.contains("DurationText.swift: import KafkaClient is not used"), "\(unused.output)")
    }
}

/// Settings described once: the docs' tables are the catalogs' (`pipelinectl settings <service> --markdown`).
@Suite("Settings: the docs' tables are the code's descriptions")
struct SettingsDocumentationTests {
    @Test(
        "each described service's docs table is its catalog; every variable it names is one the service reads",
        arguments: [
            ("ingest", "docs/ingest.md", IngestConfiguration.catalog, IngestConfiguration.environmentKeys),
            ("worker", "docs/worker.md", WorkerConfiguration.catalog, WorkerConfiguration.environmentKeys),
            ("events", "docs/events.md", EventsConfiguration.catalog, WorkerConfiguration.environmentKeys),
            ("customer-api", "docs/customer-api.md", CustomerAPIConfiguration.catalog, CustomerAPIConfiguration.environmentKeys),
            ("webhooks", "docs/webhooks.md", WebhooksConfiguration.catalog, WebhooksConfiguration.environmentKeys),
            ("console", "docs/console.md", ConsoleConfiguration.catalog, ConsoleConfiguration.environmentKeys),
            ("shared", "docs/worker.md", PipelineSettings.catalog, WorkerConfiguration.environmentKeys),
            ("kafka", "docs/kafka-client.md", KafkaEnvironment.catalog, IngestConfiguration.environmentKeys),
            ("read-replicas", "docs/scale.md", ReadReplicaSettings.catalog, CustomerAPIConfiguration.environmentKeys),
        ])
    func documentedTable(_ service: String, _ document: String, _ catalog: SettingsCatalog, _ keys: [String]) throws {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent(document), encoding: .utf8)
        // A document may hold several generated tables (docs/worker.md: the worker's own and the shared ones): each
        // marker names the command that prints its table.
        let begin = try #require(text.range(of: "by `pipelinectl settings \(service) --markdown`"), "\(document) has no table of \(service)")
        let afterMarker = try #require(text[begin.upperBound...].range(of: "-->\n"))
        let end = try #require(text[afterMarker.upperBound...].range(of: "<!-- end of settings -->"))
        let table = String(text[afterMarker.upperBound..<end.lowerBound]).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(table == catalog.markdownTable, "regenerate with: swift run pipelinectl settings \(service) --markdown")
        for setting in catalog.settings {
            #expect(keys.contains(setting.variable))
            if let old = setting.deprecated { #expect(keys.contains(old), "\(old) is still read") }
        }
    }

    @Test("a deprecated …_MS variable is still read; the new name wins; a bad duration names its variable")
    func deprecatedNames() throws {
        let base = ["KAFKA_BOOTSTRAP_SERVERS": "localhost:9092"]
        #expect(try IngestConfiguration.fromEnvironment(EnvironmentReader(base)).produceTimeout == .seconds(10))
        #expect(try IngestConfiguration.fromEnvironment(EnvironmentReader(base.merging(["INGEST_PRODUCE_TIMEOUT_MS": "2500"]) { $1 })).produceTimeout == .milliseconds(2_500))
        let both = base.merging(["INGEST_PRODUCE_TIMEOUT_MS": "2500", "INGEST_PRODUCE_TIMEOUT": "750ms"]) { $1 }
        #expect(try IngestConfiguration.fromEnvironment(EnvironmentReader(both)).produceTimeout == .milliseconds(750))
        #expect(throws: ConfigurationError.self) { try IngestConfiguration.fromEnvironment(EnvironmentReader(base.merging(["INGEST_PRODUCE_TIMEOUT": "10 s"]) { $1 })) }
        do {
            _ = try IngestConfiguration.fromEnvironment(EnvironmentReader(base.merging(["INGEST_IDLE_TIMEOUT": "2h"]) { $1 }))
            Issue.record("2h is above the idle timeout's range")
        } catch {
            #expect(error.variable == "INGEST_IDLE_TIMEOUT" && error.reason.contains("outside"), "\(error)")
        }
    }
}
