@_spi(Benchmarks) import AppStoreNotifications
import Benchmark
import TestSupport

/// package-benchmark suites for the verification path: wall and CPU time, allocations and peak memory per
/// notification, which the verify-bench program (ratios against openssl's ceiling) does not show.
///
///     swift package --package-path Benchmarks benchmark --target Verification
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .peakMemoryResident], maxDuration: .seconds(3))

    let authority = try! TestCertificateAuthority()
    let minter = NotificationMinter(chain: try! authority.issueChain())
    let notifications = (0..<200).map { minter.signedNotification(.sample(seed: $0, signedDate: 1_780_000_000_000 + Int64($0))) }
    let verifier = try! SignedPayloadVerifier(configuration: .init(
        apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
    let payload = Base64.decode(ArraySlice(notifications[0].utf8.split(separator: UInt8(ascii: "."))[1]), alphabet: .url)!

    Benchmark("verify a notification (3 JWS, warm chain cache)") { benchmark in
        _ = try await verifier.verifyNotification(notifications[0])  // warms the chain cache
        benchmark.startMeasurement()
        for index in benchmark.scaledIterations { blackHole(try await verifier.verifyNotification(notifications[index % notifications.count])) }
    }

    Benchmark("parse without cryptography (structure, base64, JSON, SHA-256)") { benchmark in
        for index in benchmark.scaledIterations { blackHole(try verifier.parseWithoutCryptography(notifications[index % notifications.count])) }
    }

    Benchmark("strict JSON parse of a notification payload") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try StrictJSONParser().parse(payload)) }
    }
}
