import Foundation
import TestSupport

/// Runs the built `pipelinectl` (scripts/test.sh builds it before the tests) against the PostgreSQL at `postgresURL`,
/// with `input` on its standard input; returns its exit status and its standard output (and standard error too with
/// `includeErrors`, for the tests that check what a refusal says). Waits on a thread of its own
/// (`DedicatedThread`), not one of the concurrency pool's.
package func runPipelinectl(_ arguments: [String], postgresURL: String, input: String? = nil, includeErrors: Bool = false) async throws -> (status: Int32, output: String) {
    try await DedicatedThread.run { try runPipelinectlBlocking(arguments, postgresURL: postgresURL, input: input, includeErrors: includeErrors) }
}

private func runPipelinectlBlocking(_ arguments: [String], postgresURL: String, input: String?, includeErrors: Bool) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = repositoryRoot.appendingPathComponent(".build/debug/pipelinectl")
    process.arguments = arguments
    var environment = ProcessInfo.processInfo.environment
    environment["POSTGRES_URL"] = postgresURL
    process.environment = environment
    let output = Pipe()
    process.standardOutput = output
    process.standardError = includeErrors ? output : FileHandle.nullDevice
    let stdin = Pipe()
    process.standardInput = stdin
    try process.run()
    if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
    try stdin.fileHandleForWriting.close()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}
