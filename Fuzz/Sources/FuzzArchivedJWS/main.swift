import AppStoreNotifications
import FuzzSupport

/// libFuzzer target: the archive's taking apart of a JWS (ArchivedJWS), which scans the decoded payload's JSON
/// text for nested JWS strings before anything about it is trusted again. Properties: whatever it takes apart
/// rebuilds to exactly the input bytes, every header it references is among the headers it returns, and the same
/// input taken apart twice gives the same parts.
public func archivedJWSFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let archived = ArchivedJWS.decompose(bytes) else { return 0 }
    precondition(archived.headers[archived.outer.headerDigest] != nil, "the outer header is not among the headers")
    precondition(archived.nested.allSatisfy { archived.headers[$0.headerDigest] != nil }, "a nested header is not among the headers")
    let rebuilt = archived.signedPayload(header: { archived.headers[$0] })
    precondition(rebuilt.map { Array($0.utf8) } == bytes, "taken apart, it did not rebuild to the same bytes")
    precondition(ArchivedJWS.decompose(bytes) == archived, "taking apart is not deterministic")
    return 0
}

/// The executable's entry point (SwiftPM makes `FuzzArchivedJWS_main` the process's `main`): libFuzzer's driver.
@_cdecl("FuzzArchivedJWS_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runLibFuzzer(argc, argv) { data, size in archivedJWSFuzz(data, size) }
}
