import AppStoreNotifications
import FuzzSupport
import Foundation

/// libFuzzer target: the strict JSON parser (every body ingest checks, every JWS header and payload the worker
/// parses). Properties, beyond "no crash": what it accepts, Foundation's JSONSerialization accepts too, with the
/// same structure; what it accepts serialises and parses back to the same value.
public func strictJSONFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let value = try? StrictJSONParser().parse(bytes) else { return 0 }
    // Round trip: our serialisation of what we accepted parses back to the same value.
    let again = try? StrictJSONParser().parse(Array(value.serialized.utf8))
    precondition(again == value, "round trip changed the value")
    // Agreement: Foundation accepts it too and sees the same shape.
    guard let foundation = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else {
        fatalError("the strict parser accepted what JSONSerialization refuses")
    }
    precondition(sameShape(value, foundation), "the strict parser and JSONSerialization disagree")
    return 0
}

func sameShape(_ ours: JSONValue, _ theirs: Any) -> Bool {
    switch ours {
    case .null: return theirs is NSNull
    case .bool(let bool): return (theirs as? Bool) == bool
    case .number: return theirs is NSNumber
    case .string(let string): return (theirs as? String) == string
    case .array(let elements):
        guard let array = theirs as? [Any], array.count == elements.count else { return false }
        return zip(elements, array).allSatisfy { sameShape($0, $1) }
    case .object(let object):
        guard let dictionary = theirs as? [String: Any], dictionary.count == object.members.count else { return false }
        return object.members.allSatisfy { member in dictionary[member.key].map { sameShape(member.value, $0) } ?? false }
    }
}

/// The executable's entry point (SwiftPM makes `FuzzStrictJSON_main` the process's `main`): libFuzzer's driver.
@_cdecl("FuzzStrictJSON_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runLibFuzzer(argc, argv) { data, size in strictJSONFuzz(data, size) }
}
