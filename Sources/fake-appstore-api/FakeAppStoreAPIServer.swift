import AppStoreNotifications
import Crypto
import Foundation
import Hummingbird
import TestSupport

/// The demo's Apple: the fake App Store Server API as a process (`scripts/run.sh` starts it). It mints an API key
/// (written as a `.p8`, mode 0600, for pipelinectl's APPSTORE_PRIVATE_KEY_FILE) and an Apple-shaped signing chain
/// (its root written as PEM, for the demo workers' TRUSTED_ROOTS); both exist only for this run. Besides Apple's
/// endpoints it serves `POST /fake/send?subscriptions=N&first=K`: mint N subscription lifecycles and "send" each
/// to ingest as Apple would, recording the attempts that Get Notification History then reports.
///
///     fake-appstore-api PORT KEY_OUT ROOT_OUT BUNDLE_ID INGEST_URL
@main
struct FakeAppStoreAPIServer {
    static let keyId = "DEMOKEY001"
    static let issuerId = "00000000-demo-4000-8000-000000000001"

    static func main() async throws {
        let arguments = CommandLine.arguments
        if arguments.dropFirst().contains(where: { $0 == "--help" || $0 == "-h" }) {
            print("usage: fake-appstore-api PORT KEY_OUT ROOT_OUT BUNDLE_ID INGEST_URL\n  the demo's fake App Store Server API (scripts/run.sh starts it); reads no environment")
            exit(0)
        }
        guard arguments.count == 6, let port = Int(arguments[1]) else {
            FileHandle.standardError.write(Data("usage: fake-appstore-api PORT KEY_OUT ROOT_OUT BUNDLE_ID INGEST_URL\n".utf8))
            exit(2)
        }
        let (keyOut, rootOut, bundleId, ingestURL) = (arguments[2], arguments[3], arguments[4], arguments[5])
        let key = P256.Signing.PrivateKey()
        guard FileManager.default.createFile(atPath: keyOut, contents: Data(key.pemRepresentation.utf8), attributes: [.posixPermissions: 0o600]) else {
            FileHandle.standardError.write(Data("fake-appstore-api: cannot write the key to \(keyOut)\n".utf8))
            exit(1)
        }
        let authority = try TestCertificateAuthority()
        // Atomically (a rename): the demo starts its workers once the file is there, and they must never read half of it.
        try Data((try authority.rootCertificate.serializeAsPEM().pemString + "\n").utf8).write(to: URL(fileURLWithPath: rootOut), options: .atomic)
        let minter = NotificationMinter(chain: try authority.issueChain(), bundleId: bundleId)
        let fake = FakeAppStoreServerAPI(configuration: .init(
            keyId: keyId, issuerId: issuerId, publicKey: key.publicKey, bundleId: bundleId, environment: .production, ingestURL: ingestURL, minter: minter))
        _ = try await fake.start(port: port) { router in
            router.post("/fake/send") { request, _ -> Response in
                let subscriptions = request.uri.queryParameters.get("subscriptions").flatMap { Int($0) } ?? 5
                let first = request.uri.queryParameters.get("first").flatMap { Int($0) } ?? 500
                let start = Int64(Date().timeIntervalSince1970 * 1000) - 70 * 86_400_000
                var results: [String: Int] = [:]
                for event in NotificationMinter.lifecycleEvents(subscriptions: subscriptions, firstSubscription: first, start: start) {
                    results[await fake.send(minter.signedNotification(event)).rawValue, default: 0] += 1
                }
                let summary = JSONObject(members: results.sorted { $0.key < $1.key }.map { .init(key: $0.key, value: .number(JSONNumber(Int64($0.value)))) })
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: .init(string: summary.serialized + "\n")))
            }
        }
        print("fake App Store Server API on 127.0.0.1:\(port); key id \(keyId), issuer \(issuerId); sends to \(ingestURL)")
        while true { try await Task.sleep(for: .seconds(3_600)) }
    }
}
