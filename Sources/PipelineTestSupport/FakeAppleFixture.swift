import AppStoreNotifications
import AppStoreServerAPI
import Crypto
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

package struct FakeAppleFixture: Sendable {
    package static let keyId = "TESTKEY123"
    package static let issuerId = "57246542-96fe-1a63-e053-0824d011072a"
    package static let bundleId = "com.example.pipeline.app"

    package let key = P256.Signing.PrivateKey()
    package let fake: FakeAppStoreServerAPI
    package let minter: NotificationMinter
    package let port: Int

    package init(minter: NotificationMinter, ingestURL: String? = nil, environment: Environment = .production) async throws {
        self.minter = minter
        fake = FakeAppStoreServerAPI(configuration: .init(
            keyId: Self.keyId, issuerId: Self.issuerId, publicKey: key.publicKey, bundleId: Self.bundleId, environment: environment, ingestURL: ingestURL,
            minter: minter), logger: ingestTestLogger)
        port = try await fake.start()
    }

    package func configuration(key: P256.Signing.PrivateKey? = nil, keyId: String = Self.keyId, environment: Environment = .production) -> AppStoreServerAPIConfiguration {
        var configuration = AppStoreServerAPIConfiguration(
            keyId: keyId, issuerId: Self.issuerId, signingKey: key ?? self.key, environment: environment, baseURL: fake.baseURL)
        configuration.retryPolicy.initialBackoff = .milliseconds(50)
        configuration.retryPolicy.maximumBackoff = .milliseconds(400)
        return configuration
    }

    package func client(key: P256.Signing.PrivateKey? = nil, keyId: String = Self.keyId) -> AppStoreServerAPIClient {
        AppStoreServerAPIClient(configuration: configuration(key: key, keyId: keyId), logger: ingestTestLogger)
    }

    /// The `.p8` PEM of the key, written 0600 into `directory`, for pipelinectl.
    package func writeKey(to directory: String) throws -> String {
        let path = directory + "/AuthKey_\(Self.keyId).p8"
        try key.pemRepresentation.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        return path
    }

    /// The environment pipelinectl reads (as an operator would set it).
    package func environment(keyFile: String) -> [String: String] {
        ["APPSTORE_KEY_ID": Self.keyId, "APPSTORE_ISSUER_ID": Self.issuerId, "APPSTORE_PRIVATE_KEY_FILE": keyFile, "APPSTORE_API_BASE_URL": fake.baseURL]
    }
}
