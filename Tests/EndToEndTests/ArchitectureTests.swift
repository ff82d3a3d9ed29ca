import Foundation
import PipelineTestSupport
import Testing

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
        for item in ["Sources", "Tests", "docs/architecture.md", "scripts/architecture.py", "scripts/check-imports.py"] {
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
