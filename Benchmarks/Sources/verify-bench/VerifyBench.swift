@_spi(Benchmarks) import AppStoreNotifications
import AppStoreServerAPI
import Crypto
import Foundation
import TestSupport

/// Verification throughput against the machine's own ECDSA P-256 ceiling, measured in the same run.
///
/// Prints notifications/s and JWS/s (each notification = outer + signedTransactionInfo + signedRenewalInfo,
/// so 3 ES256 verifications) on one core and on all cores, warm and cold chain cache, and the ratio of the
/// warm one-core rate to `openssl speed ecdsap256`'s verify rate divided by 3. A program, not a test: the
/// figures depend on the machine and its load.
@main
struct VerifyBench {
    static func main() async throws {
        let count = BenchArguments(usage: "verify-bench [N]", required: 0).int(1, default: 3000)
        let coldCount = max(50, count / 20)

        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain())
        let notifications = (0..<count).map { index in
            minter.signedNotification(.sample(seed: index, signedDate: 1_780_000_000_000 + Int64(index)))
        }
        let averageBytes = notifications.reduce(0) { $0 + $1.utf8.count } / max(1, notifications.count)
        let configuration = try SignedPayloadVerifier.Configuration(
            apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER])

        let ceiling = opensslVerifyRate()
        // Bytes hashed per notification: the signing input (header.payload) of the outer JWS and of each nested one.
        let signedBytes: Int = {
            guard let archived = ArchivedJWS.decompose(notifications[0]) else { return 0 }
            let outer = notifications[0].utf8.count - archived.outer.signature.utf8.count - 1
            return archived.nested.reduce(outer) { total, part in
                total + (archived.headers[part.headerDigest]?.utf8.count ?? 0) + 1 + Base64.encode(Array(part.payload.utf8), alphabet: .url).utf8.count
            }
        }()
        let hashRate = opensslSHA256BytesPerSecond(bytes: max(1, signedBytes / 3))
        let cores = ProcessInfo.processInfo.activeProcessorCount
        print("verify-bench: \(count) notifications of \(averageBytes) bytes (3 JWS each), \(cores) cores")

        // Warm cache, one core.
        let verifier = try SignedPayloadVerifier(configuration: configuration)
        _ = try await verifier.verifyNotification(notifications[0])
        let oneCore = try await measure(count: count) {
            for notification in notifications { _ = try await verifier.verifyNotification(notification) }
        }
        // Warm cache, all cores (one task per core, sharing one verifier and its cache).
        let allCores = try await measure(count: count) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for core in 0..<cores {
                    group.addTask {
                        for index in stride(from: core, to: notifications.count, by: cores) {
                            _ = try await verifier.verifyNotification(notifications[index])
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        // Cold cache: a fresh verifier per notification, so every chain is built and checked (2 × P-384).
        let cold = try await measure(count: coldCount) {
            for notification in notifications.prefix(coldCount) {
                _ = try await SignedPayloadVerifier(configuration: configuration).verifyNotification(notification)
            }
        }

        let breakdown = try await componentBreakdown(notifications[0])

        func line(_ name: String, _ rate: Double) -> String {
            String(format: "%-28@ %9.0f notifications/s %9.0f JWS/s", name as NSString, rate, rate * 3)
        }
        print(line("one core, warm cache", oneCore))
        print(line("all cores, warm cache", allCores))
        print(line("one core, cold cache", cold))
        if let ceiling {
            let perNotification = ceiling / 3
            print(String(format: "openssl speed ecdsap256 verify: %.0f/s -> ceiling %.0f notifications/s per core", ceiling, perNotification))
            print(String(format: "ratio (one core, warm) to ceiling: %.2f (target >= 0.85)", oneCore / perNotification))
            print(String(format: "ratio (all cores, warm) to %d x ceiling: %.2f", cores, allCores / (perNotification * Double(cores))))
            if let hashRate, signedBytes > 0 {
                // The second ceiling: 3 ECDSA verifies plus SHA-256 of the signed bytes at openssl's own rate.
                let withHashing = 1 / (3 / ceiling + Double(signedBytes) / hashRate)
                print(String(format: "openssl speed -bytes %d sha256: %.0f MB/s; %d signed bytes per notification -> ceiling with hashing %.0f notifications/s per core",
                    signedBytes / 3, hashRate / 1e6, signedBytes, withHashing))
                print(String(format: "ratio (one core, warm) to the ceiling with hashing: %.2f (target >= 0.85)", oneCore / withHashing))
            }
        } else {
            print("openssl not found: no ceiling measured")
        }
        print("where one warm notification's time goes (single core, microseconds):")
        for (name, micros) in breakdown { print(String(format: "  %-44@ %8.1f", name as NSString, micros)) }
    }

    /// Costs of the pieces of one notification's verification, measured separately.
    static func componentBreakdown(_ notification: String) async throws -> [(String, Double)] {
        let repeats = 300
        func micros(_ body: () throws -> Void) rethrows -> Double {
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<repeats { try body() }
            let elapsed = clock.now - start
            return (Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(repeats)
        }
        // The three JWSs of the notification, split once outside the timed regions.
        let outerPayload = Base64.decode(ArraySlice(notification.utf8.split(separator: UInt8(ascii: "."))[1]), alphabet: .url)!
        let payload = try StrictJSONParser().parseObject(outerPayload)
        let data = payload["data"]!.objectValue!
        let jwss = [notification, data["signedTransactionInfo"]!.stringValue!, data["signedRenewalInfo"]!.stringValue!]
        let segments = jwss.map { Array($0.utf8).split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false) }
        let signedBytes = jwss.reduce(0) { $0 + $1.utf8.count }
        let decoded = segments.map { $0.prefix(2).map { Base64.decode($0, alphabet: .url)! } }

        let key = P256.Signing.PrivateKey()
        let digest = SHA256.hash(data: [1, 2, 3])
        let signature = try key.signature(for: digest)
        let publicKey = key.publicKey
        let verifier = try SignedPayloadVerifier(configuration: .init(apps: [AppIdentity(bundleId: nil, appAppleId: nil)]))
        var result: [(String, Double)] = []
        result.append(("3 x P-256 verify (swift-crypto)", 3 * micros { _ = publicKey.isValidSignature(signature, for: digest) }))
        result.append(("SHA-256 of \(signedBytes) signed bytes", micros { for jws in jwss { var h = SHA256(); h.update(data: Array(jws.utf8)); _ = h.finalize() } }))
        result.append(("base64url-decode all segments", micros {
            for jws in segments { for segment in jws { _ = Base64.decode(segment, alphabet: .url) } }
        }))
        result.append(("strict JSON parse of headers and payloads", try micros {
            for parts in decoded { for part in parts { _ = try StrictJSONParser().parse(part) } }
        }))
        result.append(("parse steps 1-3 (incl. SHA-256), 3 JWS", try micros {
            for jws in jwss { _ = try verifier.parseWithoutCryptography(jws) }
        }))
        let transactionJSON = try StrictJSONParser().parse(decoded[1][1])
        let renewalJSON = try StrictJSONParser().parse(decoded[2][1])
        result.append(("typed decode of the 3 models", try micros {
            _ = try JSONValueDecoder().decode(ResponseBodyV2DecodedPayload.self, from: .object(payload))
            _ = try JSONValueDecoder().decode(JWSTransactionDecodedPayload.self, from: transactionJSON)
            _ = try JSONValueDecoder().decode(JWSRenewalInfoDecodedPayload.self, from: renewalJSON)
        }))
        // The App Store Server API's bearer token (docs/app-store-server-api.md): what signing one costs, and a reuse.
        let apiKey = P256.Signing.PrivateKey()
        let header = JSONObject(["alg": .string("ES256"), "kid": .string("K"), "typ": .string("JWT")])
        let claims = JSONObject([
            "iss": .string("I"), "iat": .number(JSONNumber(1_790_000_000)), "exp": .number(JSONNumber(1_790_001_200)), "aud": .string("appstoreconnect-v1"),
            "bid": .string("com.example.app"),
        ])
        result.append(("App Store Server API JWT, signed anew", micros { _ = AppStoreTokenSigner.sign(header: header, claims: claims, key: apiKey) }))
        let signer = AppStoreTokenSigner(keyId: "K", issuerId: "I", signingKey: apiKey)
        _ = signer.token(bundleId: "com.example.app")
        result.append(("App Store Server API JWT, reused from cache", micros { _ = signer.token(bundleId: "com.example.app") }))
        return result
    }

    static func measure(count: Int, _ body: @Sendable () async throws -> Void) async throws -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        try await body()
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(count) / seconds
    }

    /// `openssl speed ARGUMENTS`'s standard output, or nil when openssl cannot be run.
    static func opensslSpeed(_ arguments: [String]) -> String? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl", "speed"] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return output
    }

    /// `openssl speed -seconds 2 -bytes N sha256`, in bytes per second ("sha256  1760038.79k": thousands of bytes/s).
    static func opensslSHA256BytesPerSecond(bytes: Int) -> Double? {
        guard let output = opensslSpeed(["-seconds", "2", "-bytes", String(bytes), "sha256"]),
            let row = output.split(separator: "\n").last(where: { $0.hasPrefix("sha256") }), let last = row.split(separator: " ").last,
            let value = Double(last.dropLast())
        else { return nil }
        return value * 1_000
    }

    /// `openssl speed -seconds 3 ecdsap256`, verify/s column.
    static func opensslVerifyRate() -> Double? {
        // "256 bits ecdsa (nistp256)   0.0000s   0.0001s  24944.4   7760.0": the last column is verify/s.
        guard let output = opensslSpeed(["-seconds", "3", "ecdsap256"]),
            let row = output.split(separator: "\n").last(where: { $0.contains("nistp256") })
        else { return nil }
        return row.split(separator: " ").last.flatMap { Double($0) }
    }
}
