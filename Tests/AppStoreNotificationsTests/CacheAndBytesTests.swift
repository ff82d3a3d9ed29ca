@testable import AppStoreNotifications
import Testing

/// The verifier's bounded caches remember the entry used last in front of their dictionary; that slot must never
/// outlive what the dictionary says (an updated value, an evicted key). The archive's placeholder search finds a
/// needle wherever it is, whatever its length.
@Suite("Bounded cache and byte searches")
struct CacheAndBytesTests {
    @Test("the last entry answers first, follows updates, and goes with its eviction")
    func boundedCache() {
        let cache = BoundedCache<String, Int>(capacity: 2)
        #expect(cache.lookup("a") == nil)
        cache.insert(1, for: "a")
        #expect(cache.lookup("a") == 1)
        cache.insert(2, for: "a")
        #expect(cache.lookup("a") == 2, "an update replaces the remembered value")
        cache.insert(3, for: "b")
        #expect(cache.lookup("a") == 2 && cache.lookup("b") == 3)
        cache.insert(4, for: "c")  // evicts "a", the oldest insertion
        #expect(cache.lookup("a") == nil)
        #expect(cache.lookup("c") == 4)
        _ = cache.lookup("b")  // "b" is the last entry found
        cache.insert(5, for: "d")  // evicts "b"
        #expect(cache.lookup("b") == nil, "an evicted key is not answered from the last-entry slot")
        #expect(cache.count == 2)
    }

    @Test("contains: at the start, the end, overlapping near-misses, and needles of 0 and 1 bytes")
    func contains() {
        let needle = ArchivedJWS.placeholderPrefix
        #expect(ArchivedJWS.contains(needle + Array("7\"".utf8), needle))
        #expect(ArchivedJWS.contains(Array("{\"a\":".utf8) + needle, needle))
        #expect(!ArchivedJWS.contains(Array(#"{"a":"\u0002","b":"\\u0001"}"#.utf8), needle))
        #expect(!ArchivedJWS.contains(Array(needle.dropLast()), needle))
        #expect(ArchivedJWS.contains(Array("abc".utf8), []))
        #expect(ArchivedJWS.contains(Array("abc".utf8), [UInt8(ascii: "c")]))
        #expect(!ArchivedJWS.contains(Array("abc".utf8), [UInt8(ascii: "d")]))
    }

    @Test("sameBytes compares whole buffers, empty ones included")
    func bytes() {
        let a: [UInt8] = [1, 2, 3], b: [UInt8] = [1, 2, 4], empty: [UInt8] = []
        a.withUnsafeBufferPointer { x in
            #expect(a.withUnsafeBufferPointer { sameBytes(x, $0) })
            #expect(!b.withUnsafeBufferPointer { sameBytes(x, $0) })
            #expect(!empty.withUnsafeBufferPointer { sameBytes(x, $0) })
        }
        #expect(empty.withUnsafeBufferPointer { e in [UInt8]().withUnsafeBufferPointer { sameBytes(e, $0) } })
    }
}
