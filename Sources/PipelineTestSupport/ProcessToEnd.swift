import Foundation

/// A child process run to its end with `input` on its standard input: its exit status, its standard output, and its
/// standard error as `errors` says. Blocks the calling thread (callers in async code wrap it in `DedicatedThread`).
package enum ProcessToEnd {
    /// Where the child's standard error goes.
    package enum Errors {
        /// Into a file of its own, returned apart (a chatty failure never fills a pipe nobody reads).
        case captured
        /// Into the output, interleaved as written.
        case merged
        /// Nowhere.
        case discarded
    }

    package static func run(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil, input: String? = nil, errors: Errors
    ) throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        let stdin = Pipe(), stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        let errorsFile = FileManager.default.temporaryDirectory.appendingPathComponent("process-\(UUID().uuidString).err")
        var errorsHandle: FileHandle?
        switch errors {
        case .captured:
            _ = FileManager.default.createFile(atPath: errorsFile.path, contents: nil)
            errorsHandle = try FileHandle(forWritingTo: errorsFile)
            process.standardError = errorsHandle
        case .merged: process.standardError = stdout
        case .discarded: process.standardError = FileHandle.nullDevice
        }
        defer { if errorsHandle != nil { try? FileManager.default.removeItem(at: errorsFile) } }
        try process.run()
        if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        try errorsHandle?.close()
        let errorText = errorsHandle == nil ? "" : (try? String(contentsOf: errorsFile, encoding: .utf8)) ?? ""
        return (process.terminationStatus, String(decoding: output, as: UTF8.self), errorText)
    }
}
