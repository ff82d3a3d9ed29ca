import AppStoreNotifications
import AsyncHTTPClient
import Foundation
import NIOCore
import PipelineConfiguration

/// `VERIFY_ONLINE_CHECKS` and its companions: online revocation checks (docs/verification.md) over HTTP.
public struct OnlineRevocationSettings: Sendable, Hashable {
    /// `VERIFY_ONLINE_CHECKS` (default false).
    public var enabled = false
    /// `VERIFY_ONLINE_CACHE` (default 1h): how long a chain that passed is not asked about again.
    public var cacheLifetime: Duration = .seconds(3600)
    /// `VERIFY_ONLINE_TIMEOUT` (default 5s; `VERIFY_ONLINE_TIMEOUT` still read): one OCSP request's deadline.
    public var timeout: Duration = .seconds(5)

    public init() {}

    /// Each described once: the parser below and the shared settings' catalog read these.
    enum Settings {
        static let enabled = Setting.bool(
            "VERIFY_ONLINE_CHECKS", default: false,
            "online revocation checks (OCSP) of every chain verified (docs/verification.md): a revoked certificate or a bad answer is dead-lettered with its code; no answer holds back that record's partition only")
        static let cacheLifetime = Setting.duration("VERIFY_ONLINE_CACHE", default: .seconds(3600), "how long a chain that passed is not asked about again")
        static let timeout = Setting.duration(
            "VERIFY_ONLINE_TIMEOUT", default: .seconds(5), range: .milliseconds(100) ... .seconds(60), deprecatedMilliseconds: "VERIFY_ONLINE_TIMEOUT_MS",
            "one OCSP request's deadline")

        static let catalog = SettingsCatalog(component: "online-revocation", settings: [enabled.description, cacheLifetime.description, timeout.description])
    }

    public static let environmentKeys = Settings.catalog.environmentKeys

    public static func fromEnvironment(_ environment: EnvironmentReader) throws(ConfigurationError) -> OnlineRevocationSettings {
        var settings = OnlineRevocationSettings()
        settings.enabled = try Settings.enabled.read(environment)
        settings.cacheLifetime = try Settings.cacheLifetime.read(environment)
        settings.timeout = try Settings.timeout.read(environment)
        return settings
    }

    /// The checks, over the process's OCSP client: a POST of the DER request (`application/ocsp-request`, RFC 6960
    /// appendix A.1) to the certificate's responder; anything but a 200 with a body throws (the record waits).
    public var checks: OnlineRevocationChecks? {
        guard enabled else { return nil }
        let timeout = TimeAmount(timeout)
        return OnlineRevocationChecks(cacheLifetime: cacheLifetime) { request, uri in
            var http = HTTPClientRequest(url: uri)
            http.method = .POST
            http.headers.add(name: "Content-Type", value: "application/ocsp-request")
            http.headers.add(name: "Accept", value: "application/ocsp-response")
            http.body = .bytes(ByteBuffer(bytes: request))
            let response = try await Self.client.execute(http, timeout: timeout)
            guard response.status == .ok else { throw OCSPResponderError(reason: "HTTP \(response.status.code)") }
            let body = try await response.body.collect(upTo: 64 * 1024)
            guard body.readableBytes > 0 else { throw OCSPResponderError(reason: "an empty answer") }
            return Array(buffer: body)
        }
    }
}

extension OnlineRevocationSettings {
    /// The OCSP client: AsyncHTTPClient's own spans off (they record `url.full`; docs/tracing.md), kept for the
    /// process's life like `HTTPClient.shared`.
    static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.tracing.tracer = nil
        configuration.redirectConfiguration = .disallow
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()
}

/// The OCSP responder did not answer usably.
public struct OCSPResponderError: Error, CustomStringConvertible {
    public var reason: String
    public var description: String { "the OCSP responder answered \(reason)" }
}
