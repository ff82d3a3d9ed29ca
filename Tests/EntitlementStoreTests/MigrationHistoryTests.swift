import EntitlementStore
import Testing

/// A migration a deployment has run is never run again, so editing its SQL changes nothing there while a fresh
/// database gets the edit: the two would drift apart silently. Each migration's text is pinned here by a digest;
/// a change of schema is a new migration. (A refactoring that builds the same text differently keeps the digests.)
@Suite("Applied migrations never change")
struct MigrationHistoryTests {
    /// FNV-1a (64 bits) of each migration's statements joined by a NUL: a fingerprint, not a security measure.
    static func fingerprint(_ migration: Migrations.Migration) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in migration.sql.joined(separator: "\u{0}").utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return String(hash, radix: 16)
    }

    /// The fingerprints of migrations 1–N as released. A new migration adds its line.
    static let released: [Int: String] = [
        1: "d5baf75181523aaa", 2: "7ae7f2be2a3cf638", 3: "4e74c79a1ed9a0a5", 4: "35412e55112ff80c",
        5: "9500ad234b94472e", 6: "d295077ef4404373", 7: "16f590fa033b5ff0", 8: "1742ae9ca3497fe0",
        9: "a5b449462914ca86", 10: "f5180134df7a740d", 11: "87848ae16af74d68", 12: "a13c763043bfdd42",
        13: "2f657e56b0c0637c", 14: "3b2dc20b4e1617cc", 15: "d5fabda6769ad1a9", 16: "b9c00e4d5ab56e8",
        17: "efb860e3f5b756ea", 18: "72dbb0117b03b61f", 19: "e7f4de30aa2b23a1", 20: "ddfe7b56b97e9005",
        21: "ce9ebf5ebe6bf967",
        22: "42e19ebbf19435c7",
        23: "8975d3efd059c016",
        24: "34a622f7eab0cd20",
        25: "6c7cde98cd6a77ef",
        26: "a6c0a18a1afb2c60",
        27: "ffd7cb006685f37d",
        28: "81574f37abad4f71",
    ]

    @Test("every released migration's SQL is the text deployments ran; versions are 1…N without a gap")
    func pinned() {
        #expect(Migrations.all.map(\.version) == Array(1...Migrations.all.count))
        let actual = Dictionary(uniqueKeysWithValues: Migrations.all.map { ($0.version, Self.fingerprint($0)) })
        for (version, fingerprint) in Self.released {
            #expect(actual[version] == fingerprint, "migration \(version) changed: write a new migration instead")
        }
        let unpinned = actual.keys.filter { Self.released[$0] == nil }.sorted()
        #expect(unpinned.isEmpty, "pin the new migration(s): \(unpinned.map { "\($0): \"\(actual[$0]!)\"," }.joined(separator: " "))")
    }
}
