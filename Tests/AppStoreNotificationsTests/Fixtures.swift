import AppStoreNotifications
import Testing

#if canImport(FoundationEssentials)
import FoundationEssentials
#endif
import Foundation

/// Test material that lives outside the repository: ../shared/vectors (other people's data stays there).
enum Fixtures {
    /// `$PIPELINE_SHARED_DIR` or `<repository>/../shared`.
    static let sharedDirectory: URL = {
        if let path = ProcessInfo.processInfo.environment["PIPELINE_SHARED_DIR"] { return URL(fileURLWithPath: path) }
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return repository.deletingLastPathComponent().appendingPathComponent("shared")
    }()

    static var vectorsDirectory: URL { sharedDirectory.appendingPathComponent("vectors") }

    /// Whether the shared vectors are present (what the suites' argument lists are built from).
    static var vectorsPresent: Bool {
        FileManager.default.fileExists(atPath: vectorsDirectory.appendingPathComponent("generated/manifest.json").path)
    }

    /// Fails the calling test when the shared vectors are missing, in CI and out of it: a vector test never passes
    /// without its vectors (set `PIPELINE_SHARED_DIR`, or keep ../shared beside the repository).
    static func requireVectors() throws {
        try #require(vectorsPresent, "shared test vectors are missing at \(vectorsDirectory.path) (PIPELINE_SHARED_DIR)")
    }

    static func bytes(_ url: URL) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: url))
    }

    static func json(_ url: URL) throws -> JSONObject {
        try StrictJSONParser().parseObject(bytes(url))
    }

    static func files(in directory: URL) -> [URL] {
        ((try? FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)) ?? [])
            .filter { $0.pathExtension == "json" && $0.lastPathComponent != "manifest.json" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }
}

/// One vector file, named after it in test output.
struct VectorFile: CustomTestStringConvertible, Sendable {
    var file: String
    var object: JSONObject
    var testDescription: String { file }

    /// Every JSON vector file in `directory`, parsed.
    static func all(in directory: URL) -> [VectorFile] {
        Fixtures.files(in: directory).compactMap { url in (try? Fixtures.json(url)).map { VectorFile(file: url.lastPathComponent, object: $0) } }
    }
}

/// JSON equality that ignores member order (documents from other tools order keys their own way).
func sameJSON(_ lhs: JSONValue, _ rhs: JSONValue) -> Bool {
    switch (lhs, rhs) {
    case (.object(let a), .object(let b)):
        guard a.count == b.count else { return false }
        return a.members.allSatisfy { member in b[member.key].map { sameJSON(member.value, $0) } ?? false }
    case (.array(let a), .array(let b)):
        return a.count == b.count && zip(a, b).allSatisfy(sameJSON)
    default:
        return lhs == rhs
    }
}
