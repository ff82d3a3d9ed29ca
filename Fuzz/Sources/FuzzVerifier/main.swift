import AppStoreNotifications
import FuzzSupport

/// libFuzzer target: the verifier up to and through the signature check (size and segment checks, the header's
/// strict JSON, `alg`, `x5c`, each certificate's base64 and DER, the chain to the trusted root, the payload's JSON,
/// the ES256 signature, identity, the nested JWSs). The first byte chooses where the fuzzer's bytes go, so each
/// stage is reached with everything before it intact:
///
/// 0: the whole compact JWS; 1: the header JSON (`$0`, `$1`, `$2` become the minted x5c entries, so the fuzzer
/// reaches the chain with real certificates); 2: the leaf's DER; 3: the intermediate's DER; 4: the payload JSON;
/// 5: the raw signature.
///
/// Properties: no crash, leak or hang; every refusal has a code and an escaped, bounded reason; and nothing is
/// accepted but what the fixture's key signed, byte for byte (a mutated JWS that verifies is a forgery; the one
/// that is accepted re-serialises to the same bytes).
public func verifierFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let fixture = MintedFixture.shared
    let mode = data[0] % 6
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let segments = fixture.segments
    let jws: String
    switch mode {
    case 0:
        jws = String(decoding: bytes, as: UTF8.self)
    case 1:
        var header = String(decoding: bytes, as: UTF8.self)
        for (index, entry) in fixture.x5c.enumerated() { header = header.replacingOccurrences(of: "$\(index)", with: entry) }
        jws = Base64.encode(Array(header.utf8), alphabet: .url) + "." + segments[1] + "." + segments[2]
    case 2, 3:
        let header = fixture.header(replacingCertificate: Int(mode) - 2, with: Base64.encode(bytes, alphabet: .standard))
        jws = Base64.encode(header, alphabet: .url) + "." + segments[1] + "." + segments[2]
    case 4:
        jws = segments[0] + "." + Base64.encode(bytes, alphabet: .url) + "." + segments[2]
    default:
        jws = segments[0] + "." + segments[1] + "." + Base64.encode(bytes, alphabet: .url)
    }
    let minted = fixture.minted
    let notification = runBlocking { () -> Result<VerifiedNotification, VerificationError> in
        do throws(VerificationError) { return .success(try await fixture.verifier.verifyNotification(jws)) } catch { return .failure(error) }
    }
    switch notification {
    case .success:
        precondition(jws == fixture.notification, "FORGERY: a notification the fixture never signed was accepted (mode \(mode))")
    case .failure(let error):
        checkRefusal(code: error.code, reason: error.reason, "verifyNotification")
    }
    // Any kind, told from the payload (what `pipelinectl verify` does with a JWS of unknown kind).
    if mode == 0 {
        let any = runBlocking { () -> Result<Bool, VerificationError> in
            do throws(VerificationError) {
                _ = try await fixture.verifier.verify(jws, as: nil)
                return .success(true)
            } catch { return .failure(error) }
        }
        switch any {
        case .success: precondition(minted.contains(jws), "FORGERY: a JWS the fixture never signed was accepted as some kind")
        case .failure(let error): checkRefusal(code: error.code, reason: error.reason, "verify(as: nil)")
        }
    }
    return 0
}

/// The executable's entry point (SwiftPM makes `FuzzVerifier_main` the process's `main`): libFuzzer's driver.
@_cdecl("FuzzVerifier_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    MintedFixture.warmUp()
    return runLibFuzzer(argc, argv) { data, size in verifierFuzz(data, size) }
}
