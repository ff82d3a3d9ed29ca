import Foundation
import TestSupport
import Testing

/// A real PostgreSQL 15 streaming standby of the test primary (`scripts/services.sh replica up`: pg_basebackup, a
/// replication slot, hot_standby), replaying WAL with `recovery_min_apply_delay` 500 ms, so every commit reaches it
/// at least half a second late: a read that goes there too early is stale, and the tests can see it.
package struct Standby {
    package static let script = repositoryRoot.appendingPathComponent("scripts/services.sh").path
    /// `postgres://…@host:port/` of the standby (a database name is appended).
    package let urlPrefix: String

    /// Whether this run's primary is the one `scripts/services.sh` started (the standby copies it); in CI it must be.
    package static var possible: Bool {
        let recorded = try? String(contentsOfFile: repositoryRoot.appendingPathComponent(".services/postgres.url").path, encoding: .utf8)
        return recorded?.trimmingCharacters(in: .whitespacesAndNewlines) == TestServices.postgresURL
    }

    /// A fresh standby, or nil where none can be made (a primary not started by scripts/services.sh, outside CI; in
    /// CI that is a recorded failure, never a silent skip).
    package static func startIfPossible(applyDelay: String) async throws -> Standby? {
        guard possible else {
            #expect(ProcessInfo.processInfo.environment["CI"] != "true", "in CI the tests' PostgreSQL is scripts/services.sh's, and its standby must start")
            return nil
        }
        return try await start(applyDelay: applyDelay)
    }

    /// A fresh standby (an earlier one removed first, so its delay is this one's).
    package static func start(applyDelay: String) async throws -> Standby {
        _ = try await run(["replica", "down"])
        let up = try await run(["replica", "up"], environment: ["PIPELINE_REPLICA_APPLY_DELAY": applyDelay])
        try #require(up.status == 0, "the standby did not start: \(up.output)")
        let line = try #require(up.output.split(separator: "\n").first { $0.hasPrefix("export POSTGRES_READ_URL=") }, "\(up.output)")
        let url = String(line.dropFirst("export POSTGRES_READ_URL=".count))
        return Standby(urlPrefix: String(url[..<(url.lastIndex(of: "/")!)]) + "/")
    }

    /// The standby's URL for a database of the primary.
    package func url(of primaryDatabase: String) -> String { urlPrefix + primaryDatabase[primaryDatabase.index(after: primaryDatabase.lastIndex(of: "/")!)...] }

    /// Stops the standby's server at once (`pg_ctl -m immediate`: as a crash), keeping its data.
    package func stop() async throws { let result = try await Self.run(["replica", "stop"]); #expect(result.status == 0, "\(result.output)") }
    package func start() async throws { let result = try await Self.run(["replica", "start"]); #expect(result.status == 0, "\(result.output)") }
    package static func remove() async { _ = try? await run(["replica", "down"]) }

    package static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, output: String) {
        // On a thread of its own: a blocking wait on the cooperative pool (two threads here) can starve the test.
        try await DedicatedThread.run {
            // Its output goes to a file, not a pipe: the standby's server, started by the script, must not hold
            // anything this test waits to see closed.
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("standby-\(UUID().uuidString).log")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            defer { try? FileManager.default.removeItem(at: log) }
            let output = try FileHandle(forWritingTo: log)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = [script] + arguments
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = output
            process.standardError = output
            try process.run()
            process.waitUntilExit()
            try output.close()
            return (process.terminationStatus, (try? String(contentsOf: log, encoding: .utf8)) ?? "")
        }
    }
}

