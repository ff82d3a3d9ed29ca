import SwiftASN1
import X509

/// Apple's marker OIDs, required on every App Store signing chain.
public enum AppleCertificateOID {
    /// Apple Worldwide Developer Relations intermediate: 1.2.840.113635.100.6.2.1.
    public static let wwdrIntermediate: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    /// Mac App Store and iTunes Store receipt signing leaf: 1.2.840.113635.100.6.11.1.
    public static let receiptSigningLeaf: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
}

/// The policy Apple's App Store Server Library adds to RFC 5280: a chain of exactly three certificates whose
/// intermediate and leaf carry Apple's marker OIDs. Without it, any certificate a configured root ever issued
/// (for any purpose) could sign notifications.
struct AppleChainPolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else {
            return .failsToMeetPolicy(reason: "chain has \(chain.count) certificates; App Store chains have exactly 3")
        }
        guard chain[1].extensions.contains(where: { $0.oid == AppleCertificateOID.wwdrIntermediate }) else {
            return .failsToMeetPolicy(reason: "intermediate lacks the Apple WWDR OID 1.2.840.113635.100.6.2.1")
        }
        guard chain[0].extensions.contains(where: { $0.oid == AppleCertificateOID.receiptSigningLeaf }) else {
            return .failsToMeetPolicy(reason: "leaf lacks the App Store receipt-signing OID 1.2.840.113635.100.6.11.1")
        }
        return .meetsPolicy
    }
}
