import AppStoreNotifications

/// A fresh test authority, a minter signing with a chain it issued, and a verifier that trusts only that authority and
/// knows the minter's app: where a test of verified notifications starts (the fuzz targets' `MintedFixture` builds on
/// the same pieces).
public struct MintedVerification: Sendable {
    public let authority: TestCertificateAuthority
    public let minter: NotificationMinter
    public let verifier: SignedPayloadVerifier

    /// The one a `MintedSuite` reads.
    public static let perProcess: MintedVerification = {
        do {
            return try MintedVerification()
        } catch {
            fatalError("the test PKI could not be minted: \(error)")
        }
    }()

    public init() throws {
        authority = try TestCertificateAuthority()
        minter = NotificationMinter(chain: try authority.issueChain())
        verifier = try SignedPayloadVerifier(
            configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
    }
}

/// A suite of minted notifications that really go through verification, on the calendar such suites share: `day`
/// in milliseconds, `start` (2026-03-01) as the first day of their stories.
public protocol MintedSuite {
    var minted: MintedVerification { get }
}

extension MintedSuite {
    /// The test process's authority, minter and verifier, minted at first use (a few milliseconds): every suite
    /// reads it and none changes it (a test that needs another app or chain copies the minter, or mints its own).
    public var minted: MintedVerification { MintedVerification.perProcess }
    public var authority: TestCertificateAuthority { minted.authority }
    public var minter: NotificationMinter { minted.minter }
    public var verifier: SignedPayloadVerifier { minted.verifier }
    public static var day: Int64 { 24 * 3600 * 1000 }
    public static var start: Int64 { TestDates.milliseconds("2026-03-01T00:00:00Z") }
}
