import Crypto

/// Apple Root CA - G3, the public trust anchor of every App Store signature.
///
/// Embedded in source (not a resource bundle) so that a single statically linked binary carries it.
/// Its SHA-256 fingerprint is checked every time the bytes are loaded: a corrupted or edited copy
/// fails loudly at start-up instead of silently trusting something else.
public enum AppleRootCertificate {
    /// SHA-256 of the DER, as published by Apple:
    /// 63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79
    public static let sha256Fingerprint = "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179"

    /// The DER bytes of Apple Root CA - G3, verified against ``sha256Fingerprint``.
    public static var derBytes: [UInt8] {
        get throws(TrustAnchorError) {
            guard let der = Base64.decode(base64Lines.joined(), alphabet: .standard) else {
                throw TrustAnchorError.corruptEmbeddedRoot("the embedded base64 does not decode")
            }
            let digest = Hex.encode(SHA256.hash(data: der))
            guard digest == sha256Fingerprint else {
                throw TrustAnchorError.corruptEmbeddedRoot("SHA-256 \(digest) is not Apple's published \(sha256Fingerprint)")
            }
            return der
        }
    }

    private static let base64Lines: [String] = [
        "MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwSQXBwbGUgUm9v",
        "dCBDQSAtIEczMSYwJAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9uIEF1dGhvcml0eTETMBEGA1UE",
        "CgwKQXBwbGUgSW5jLjELMAkGA1UEBhMCVVMwHhcNMTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2",
        "WjBnMRswGQYDVQQDDBJBcHBsZSBSb290IENBIC0gRzMxJjAkBgNVBAsMHUFwcGxlIENlcnRpZmlj",
        "YXRpb24gQXV0aG9yaXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJVUzB2MBAGByqG",
        "SM49AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtfTjjTuxxE",
        "tX/1H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517IDvYuVTZXpmkOlEKMaNC",
        "MEAwHQYDVR0OBBYEFLuw3qFYM4iapIqZ3r6966/ayySrMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0P",
        "AQH/BAQDAgEGMAoGCCqGSM49BAMDA2gAMGUCMQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3m",
        "eoyhpmvOwgPUnPWTxnS4at+qIxUCMG1mihDK1A3UT82NQz60imOlM27jbdoXt2QfyFMm+YhidDkL",
        "F1vLUagM6BgD56KyKA==",
    ]
}
