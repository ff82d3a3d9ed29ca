import AppStoreNotifications

/// A fresh test authority, a minter signing with a chain it issued, and a verifier that trusts only that authority and
/// knows the minter's app: where a test of verified notifications starts (the fuzz targets' `MintedFixture` builds on
/// the same pieces).
public struct MintedVerification: Sendable {
    public let authority: TestCertificateAuthority
    public let minter: NotificationMinter
    public let verifier: SignedPayloadVerifier

    public init() throws {
        authority = try TestCertificateAuthority()
        minter = NotificationMinter(chain: try authority.issueChain())
        verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
    }
}
