import AppStoreNotifications
import Crypto
import SwiftASN1
import X509

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A certificate authority shaped like Apple's, minted at run time: a P-384 root that issues P-384
/// intermediates carrying the WWDR OID, which issue P-256 leaves carrying the receipt-signing OID.
///
/// Nothing here is committed: keys live in memory for one test or one demo run. The `Options` switch off one
/// property of an otherwise valid chain at a time, so tests can prove each check is really made.
public struct TestCertificateAuthority: Sendable {
    public let rootKey: P384.Signing.PrivateKey
    public let rootCertificate: Certificate

    /// Creates a new self-signed root, valid 2020–2040, named like Apple's.
    public init(commonName: String = "Test Root CA - G3") throws {
        let key = P384.Signing.PrivateKey()
        let name = try Self.testName(unit: "Test Certification Authority", common: commonName)
        self.rootKey = key
        self.rootCertificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(key.publicKey),
            notValidBefore: TestDates.date("2020-01-01T00:00:00Z"),
            notValidAfter: TestDates.date("2040-01-01T00:00:00Z"),
            issuer: name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: Certificate.PublicKey(key.publicKey))
            },
            issuerPrivateKey: Certificate.PrivateKey(key))
    }

    /// DER of the root, for a verifier's trusted roots.
    public var rootDER: [UInt8] { Self.der(rootCertificate) }

    /// One property of a chain to get wrong, or none.
    public struct Options: Sendable {
        public var intermediateValidity: ClosedRange<Date>
        public var leafValidity: ClosedRange<Date>
        public var intermediateHasAppleOID = true
        public var leafHasAppleOID = true
        public var intermediateIsCertificateAuthority = true
        /// A P-384 leaf cannot sign ES256.
        public var leafUsesP384 = false
        /// An OCSP responder named in the leaf's and the intermediate's Authority Information Access, as Apple's are
        /// (`http://ocsp.apple.com/…`): what online revocation checks ask.
        public var ocspURI: String?

        public init() {
            intermediateValidity = TestDates.date("2021-03-17T20:37:10Z")...TestDates.date("2036-03-19T00:00:00Z")
            leafValidity = TestDates.date("2025-09-19T19:44:51Z")...TestDates.date("2027-10-13T17:47:23Z")
        }
    }

    /// A name of the test PKI, shaped as Apple's: country, organization, unit, common name.
    static func testName(unit: String, common: String) throws -> DistinguishedName {
        try DistinguishedName {
            CountryName("US")
            OrganizationName("Pipeline Test PKI")
            OrganizationalUnitName(unit)
            CommonName(common)
        }
    }

    /// Issues an intermediate and a leaf under this root.
    public func issueChain(_ options: Options = Options()) throws -> TestSigningChain {
        let intermediateKey = P384.Signing.PrivateKey()
        let intermediateName = try Self.testName(unit: "G6", common: "Test Worldwide Developer Relations Certification Authority")
        let intermediate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(intermediateKey.publicKey),
            notValidBefore: options.intermediateValidity.lowerBound,
            notValidAfter: options.intermediateValidity.upperBound,
            issuer: rootCertificate.subject,
            subject: intermediateName,
            signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                if options.intermediateIsCertificateAuthority {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                } else {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                }
                SubjectKeyIdentifier(hash: Certificate.PublicKey(intermediateKey.publicKey))
                try Self.issuedBy(rootCertificate, appleOID: options.intermediateHasAppleOID ? AppleCertificateOID.wwdrIntermediate : nil, ocspURI: options.ocspURI)
            },
            issuerPrivateKey: Certificate.PrivateKey(rootKey))

        let leafSigner: TestSigningChain.Signer =
            options.leafUsesP384 ? .p384(P384.Signing.PrivateKey()) : .p256(P256.Signing.PrivateKey())
        let leafName = try Self.testName(unit: "Test Worldwide Developer Relations", common: "Test Prod ECC Mac App Store and iTunes Store Receipt Signing")
        let leaf = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: leafSigner.publicKey,
            notValidBefore: options.leafValidity.lowerBound,
            notValidAfter: options.leafValidity.upperBound,
            issuer: intermediateName,
            subject: leafName,
            signatureAlgorithm: .ecdsaWithSHA384,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try Self.issuedBy(intermediate, appleOID: options.leafHasAppleOID ? AppleCertificateOID.receiptSigningLeaf : nil, ocspURI: options.ocspURI)
            },
            issuerPrivateKey: Certificate.PrivateKey(intermediateKey))
        return TestSigningChain(leaf: leaf, intermediate: intermediate, root: rootCertificate, signer: leafSigner, intermediateKey: intermediateKey)
    }

    /// What the intermediate and the leaf share about their issuer: its key identifier, Apple's marker extension
    /// (`appleOID`; `nil` when the options leave it out) and the OCSP responder's address, when one is set.
    static func issuedBy(_ issuer: Certificate, appleOID: ASN1ObjectIdentifier?, ocspURI: String?) throws -> Certificate.Extensions {
        try Certificate.Extensions {
            AuthorityKeyIdentifier(keyIdentifier: try issuer.extensions.subjectKeyIdentifier?.keyIdentifier)
            if let appleOID {
                Certificate.Extension(oid: appleOID, critical: false, value: [0x05, 0x00])
            }
            if let ocspURI {
                AuthorityInformationAccess([.init(method: .ocspServer, location: .uniformResourceIdentifier(ocspURI))])
            }
        }
    }
}

/// A leaf, its intermediate and root, and the leaf's private key: signs App Store-shaped JWSs.
public struct TestSigningChain: Sendable {
    public enum Signer: Sendable {
        case p256(P256.Signing.PrivateKey)
        case p384(P384.Signing.PrivateKey)

        var publicKey: Certificate.PublicKey {
            switch self {
            case .p256(let key): Certificate.PublicKey(key.publicKey)
            case .p384(let key): Certificate.PublicKey(key.publicKey)
            }
        }
    }

    public let leaf: Certificate
    public let intermediate: Certificate
    public let root: Certificate
    public let signer: Signer
    /// The intermediate's key: signs OCSP answers about the leaf in tests (the root's signs those about the intermediate).
    public var intermediateKey: P384.Signing.PrivateKey? = nil

    /// The `x5c` header value: leaf, intermediate, root as standard base64 DER.
    public var x5c: [String] {
        [leaf, intermediate, root].map { Base64.encode(TestCertificateAuthority.der($0), alphabet: .standard) }
    }

    /// The default protected header: `{"alg":"ES256","x5c":[…]}`.
    public var header: JSONObject {
        JSONObject(["alg": .string("ES256"), "x5c": .array(x5c.map(JSONValue.string))])
    }

    /// Signs `payload` as a compact JWS with `header` (default: the App Store header).
    public func sign(_ payload: JSONObject, header: JSONObject? = nil) -> String {
        sign(payloadBytes: Array(payload.serialized.utf8), header: header)
    }

    /// Signs raw payload bytes, for tests that need payloads that are not JSON.
    public func sign(payloadBytes: [UInt8], header: JSONObject? = nil) -> String {
        let headerSegment = Base64.encode(Array((header ?? self.header).serialized.utf8), alphabet: .url)
        let payloadSegment = Base64.encode(payloadBytes, alphabet: .url)
        let signingInput = headerSegment + "." + payloadSegment
        return signingInput + "." + Base64.encode(rawSignature(over: Array(signingInput.utf8)), alphabet: .url)
    }

    /// A raw (R‖S) signature by the leaf key.
    public func rawSignature(over bytes: [UInt8]) -> [UInt8] {
        switch signer {
        case .p256(let key): Array((try? key.signature(for: bytes))?.rawRepresentation ?? .init())
        case .p384(let key): Array((try? key.signature(for: SHA256.hash(data: bytes)))?.rawRepresentation ?? .init())
        }
    }
}

/// Fixed dates for test material.
public enum TestDates {
    /// Parses an ISO 8601 UTC date such as `2026-01-02T03:04:05Z`.
    public static func date(_ iso8601: String) -> Date {
        (try? Date(iso8601, strategy: .iso8601)) ?? Date(timeIntervalSince1970: 0)
    }

    public static func milliseconds(_ iso8601: String) -> Int64 {
        Timestamp(date(iso8601)).millisecondsSince1970
    }
}

extension TestCertificateAuthority {
    /// The DER encoding of `certificate`.
    public static func der(_ certificate: Certificate) -> [UInt8] {
        var serializer = DER.Serializer()
        try? serializer.serialize(certificate)
        return serializer.serializedBytes
    }
}
