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
    var environment = ProcessInfo.processInfo.environment
    environment["POSTGRES_URL"] = postgresURL
    let result = try ProcessToEnd.run(
        repositoryRoot.appendingPathComponent(".build/debug/pipelinectl"), arguments, environment: environment, input: input,
        errors: includeErrors ? .merged : .discarded)
    return (result.status, result.output)
}
