import SwiftASN1
import X509

/// Reads trusted root certificates from PEM (one or many) or DER bytes, as found in a file.
public enum TrustAnchorLoader {
    /// The DER of every certificate in `bytes`: a PEM file with one or more CERTIFICATE blocks, or one DER.
    public static func certificates(in bytes: [UInt8]) throws(TrustAnchorError) -> [[UInt8]] {
        if let text = String(validating: bytes, as: UTF8.self), text.contains("-----BEGIN") {
            do {
                let documents = try PEMDocument.parseMultiple(pemString: text).filter { $0.discriminator == "CERTIFICATE" }
                guard !documents.isEmpty else { throw TrustAnchorError.invalidRootCertificate("no CERTIFICATE block in the PEM") }
                return try documents.map { document in
                    _ = try Certificate(derEncoded: document.derBytes)
                    return document.derBytes
                }
            } catch let error as TrustAnchorError {
                throw error
            } catch {
                throw .invalidRootCertificate("the PEM does not hold valid certificates: \(error)")
            }
        }
        do {
            _ = try Certificate(derEncoded: bytes)
            return [bytes]
        } catch {
            throw .invalidRootCertificate("neither PEM nor a DER certificate: \(error)")
        }
    }
}
