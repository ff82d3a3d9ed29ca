/// One app a verifier accepts notifications for, and in which environments.
///
/// A worker serves several apps and both environments at once; the registry of these is the single place that
/// says which payloads are ours. A payload for any other bundle id is refused with ``VerificationError/bundleIdMismatch(_:)``.
public struct AppIdentity: Sendable, Hashable {
    /// The app's bundle id; nil matches any bundle id (for `pipelinectl verify` without `--bundle-id` only).
    public var bundleId: String?
    /// The app's Apple ID. Required to match in Production (as Apple's library does); checked in Sandbox when
    /// both sides have one. Nil skips the check (debugging only).
    public var appAppleId: Int64?
    /// The environments accepted for this app. Xcode and LocalTesting are honoured only when the verifier is
    /// configured with ``SignedPayloadVerifier/Configuration/allowLocallySignedEnvironments``.
    public var environments: Set<Environment>

    public init(bundleId: String?, appAppleId: Int64?, environments: Set<Environment> = [.production, .sandbox]) {
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environments = environments
    }
}
