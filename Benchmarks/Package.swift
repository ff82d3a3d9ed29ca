// swift-tools-version: 6.2
import PackageDescription

// The benchmarks, apart from the products (swift-kafka-client's layout): building the pipeline and running its
// tests compiles none of this. Two kinds:
//   - Benchmarks/<Name>/: package-benchmark suites (allocations, peak memory, wall and CPU time per benchmark):
//       swift package --package-path Benchmarks benchmark
//   - Sources/<name>-bench/: programs that need a broker and PostgreSQL (or openssl, kcat) and print figures with
//     ratios against a reference measured in the same run; they start the release binaries of the main package
//     (PIPELINE_BIN_DIR, default ../.build/release): docs/benchmarks.md has every command.
let package = Package(
    name: "appstore-notification-pipeline-benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        // Named: a path dependency is otherwise known by its directory's name, which is the clone's (any).
        .package(name: "appstore-notification-pipeline", path: ".."),
        .package(url: "https://github.com/ordo-one/package-benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        .executableTarget(
            name: "Verification",
            dependencies: [
                .product(name: "Benchmark", package: "package-benchmark"),
                .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline"),
                .product(name: "TestSupport", package: "appstore-notification-pipeline"),
            ],
            path: "Benchmarks/Verification",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        .executableTarget(
            name: "verify-bench",
            dependencies: [
                .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline"),
                .product(name: "AppStoreServerAPI", package: "appstore-notification-pipeline"),
                .product(name: "TestSupport", package: "appstore-notification-pipeline"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .executableTarget(
            name: "worker-bench",
            dependencies: [
                .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline"),
                .product(name: "EntitlementStore", package: "appstore-notification-pipeline"),
                .product(name: "KafkaClient", package: "appstore-notification-pipeline"),
                .product(name: "TestSupport", package: "appstore-notification-pipeline"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "ingest-bench",
            dependencies: [
                .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline"),
                .product(name: "TestSupport", package: "appstore-notification-pipeline"),
            ]
        ),
        .executableTarget(
            name: "kafka-bench",
            dependencies: [
                .product(name: "KafkaClient", package: "appstore-notification-pipeline"),
                .product(name: "TestSupport", package: "appstore-notification-pipeline"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "metrics-bench",
            dependencies: [
                .product(name: "EntitlementStore", package: "appstore-notification-pipeline"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "customer-api-bench",
            dependencies: [
                .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline"),
                .product(name: "CustomerAPI", package: "appstore-notification-pipeline"),
                .product(name: "EntitlementStore", package: "appstore-notification-pipeline"),
                .product(name: "KafkaClient", package: "appstore-notification-pipeline"),
                .product(name: "TestSupport", package: "appstore-notification-pipeline"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ]
)

// The main package's language settings, for every target here too.
for target in package.targets {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.swiftLanguageMode(.v6))
    target.swiftSettings = settings
}
