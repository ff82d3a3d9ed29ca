import AppStoreNotifications
import Foundation

/// A file holding an erasure key minted for one test (32 random bytes, hex), in the temporary directory, as a
/// deployment's `ERASURE_KEY_FILE` holds one. The caller removes it (`removeMintedFile`).
public func mintedErasureKeyFile() throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("erasure-\(UUID().uuidString).key").path
    try Hex.encode((0..<32).map { _ in UInt8.random(in: 0...255) }).write(toFile: path, atomically: true, encoding: .utf8)
    return path
}

/// Removes a file a test minted (`mintedErasureKeyFile`); a file already gone is fine.
public func removeMintedFile(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}
