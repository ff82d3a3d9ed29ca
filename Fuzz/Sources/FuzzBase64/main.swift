import AppStoreNotifications
import FuzzSupport
/// libFuzzer target: strict base64 and base64url (every JWS segment, every x5c certificate). Property: what
/// decodes re-encodes to exactly the input (the decoder accepts only the canonical encoding: no padding in
/// base64url, canonical trailing bits), and every encoding decodes back to its bytes.
public func base64Fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    for alphabet in [Base64.Alphabet.url, .standard] {
        if let decoded = Base64.decode(ArraySlice(bytes), alphabet: alphabet) {
            precondition(Array(Base64.encode(decoded, alphabet: alphabet).utf8) == bytes, "decoding accepted a non-canonical encoding")
        }
        let encoded = Base64.encode(bytes, alphabet: alphabet)
        precondition(Base64.decode(encoded, alphabet: alphabet) == bytes, "an encoding did not decode back")
    }
    return 0
}

/// The executable's entry point (SwiftPM makes `FuzzBase64_main` the process's `main`): libFuzzer's driver.
@_cdecl("FuzzBase64_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runLibFuzzer(argc, argv) { data, size in base64Fuzz(data, size) }
}
