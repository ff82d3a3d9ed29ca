import Foundation
import Testing

/// The project venv's interpreter (scripts/install.sh), run to the end: the tests use it for what Python has and
/// Swift does not (PyYAML, jsonschema, Apple's App Store Server Library). Its standard error comes back apart.
package enum VenvPython {
    package static var path: String { repositoryRoot.appendingPathComponent(".venv/bin/python3").path }

    /// `arguments` run by the venv's python with `input` on standard input: its exit status, output and errors.
    /// `purpose` says what the test needs the venv for, when it is missing.
    package static func run(_ arguments: [String], input: String? = nil, purpose: String) throws -> (status: Int32, output: String, errors: String) {
        try #require(FileManager.default.isExecutableFile(atPath: path), "run scripts/install.sh: \(purpose)")
        return try ProcessToEnd.run(URL(fileURLWithPath: path), arguments, input: input, errors: .captured)
    }
}
