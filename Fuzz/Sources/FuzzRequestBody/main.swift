import AppStoreNotifications
import FuzzSupport
/// libFuzzer target: what ingest parses before anything is verified: the HTTP body check and the unverified
/// routing-key peek, on attacker bytes. Properties: an accepted body's signedPayload is a compact JWS of three
/// non-empty base64url segments within the size limit; the peeked key, when there is one, is 1 to 128 bytes of
/// printable ASCII (it becomes a Kafka key); every refusal has a code and a reason without raw control characters.
public func requestBodyFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    do {
        let body = try ResponseBodyV2.parse(body: bytes, maximumBytes: 64 * 1024)
        try ResponseBodyV2.checkCompactJWSShape(body.signedPayload)
        let segments = body.signedPayload.split(separator: ".", omittingEmptySubsequences: false)
        precondition(segments.count == 3 && segments.allSatisfy { !$0.isEmpty } && bytes.count <= 64 * 1024, "accepted a body that is not a compact JWS")
        precondition(body.signedPayload.utf8.allSatisfy { isBase64URL($0) || $0 == UInt8(ascii: ".") }, "accepted a character outside base64url")
        checkKey(UnverifiedPeek.partitionKey(ofNotification: body.signedPayload))
    } catch {
        precondition(!error.code.isEmpty, "a refusal without a code")
        precondition(!error.reason.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" || $0.value == 0x1b }, "a refusal reason with raw control characters")
    }
    // The peek alone, on any text (the worker and tools peek records that did not come through ingest).
    checkKey(UnverifiedPeek.partitionKey(ofNotification: String(decoding: bytes, as: UTF8.self)))
    return 0
}

func checkKey(_ key: String?) {
    guard let key else { return }
    precondition((1...128).contains(key.utf8.count) && key.utf8.allSatisfy { (0x21...0x7e).contains($0) }, "the peeked key is unbounded or not printable ASCII")
}

func isBase64URL(_ byte: UInt8) -> Bool {
    (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
}

/// The executable's entry point (SwiftPM makes `FuzzRequestBody_main` the process's `main`): libFuzzer's driver.
@_cdecl("FuzzRequestBody_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runLibFuzzer(argc, argv) { data, size in requestBodyFuzz(data, size) }
}
