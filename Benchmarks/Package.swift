// swift-tools-version: 6.2
import PackageDescription

// The benchmarks, apart from the products (swift-kafka-client's layout): building the pipeline and running its
// tests compiles none of this. Two kinds:
//   - Benchmarks/<Name>/: package-benchmark suites (allocations, peak memory, wall and CPU time per benchmark):
//       swift package --package-path Benchmarks benchmark
//   - Sources/<name>-bench/: programs that need a broker and PostgreSQL (or openssl, kcat) and print figures with
//     ratios against a reference measured in the same run; they start the release binaries of the main package
//     (PIPELINE_BIN_DIR, default ../.build/release): docs/benchmarks.md has every command.
/// Products of the main package.
func pipeline(_ names: String...) -> [Target.Dependency] {
    names.map { .product(name: $0, package: "appstore-notification-pipeline") }
}

let postgresAndLogging: [Target.Dependency] = [
    .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "Logging", package: "swift-log"),
]

/// The figure-printing programs (Sources/<name>) and what each links.
let programs: [(String, [Target.Dependency])] = [
    ("verify-bench", pipeline("AppStoreNotifications", "AppStoreServerAPI", "TestSupport") + [.product(name: "Crypto", package: "swift-crypto")]),
    ("worker-bench", pipeline("AppStoreNotifications", "EntitlementStore", "KafkaClient", "TestSupport") + postgresAndLogging),
    ("ingest-bench", pipeline("AppStoreNotifications", "TestSupport")),
    ("kafka-bench", pipeline("KafkaClient", "TestSupport") + [.product(name: "Logging", package: "swift-log")]),
    ("metrics-bench", pipeline("EntitlementStore", "SubscriptionMetrics", "TestSupport") + postgresAndLogging),
    ("seed-book", pipeline("BookSeeding", "EntitlementStore", "TestSupport") + postgresAndLogging),
    ("erasure-bench", pipeline("AppStoreNotifications", "EntitlementStore", "TestSupport") + postgresAndLogging),
    ("console-bench", ["BenchSupport"] + pipeline("AppStoreNotifications", "Console", "EntitlementStore", "KafkaClient", "TestSupport") + postgresAndLogging),
    ("partition-drop-bench", ["BenchSupport"] + pipeline("AppStoreNotifications", "EntitlementStore", "TestSupport") + postgresAndLogging),
    ("online-migration-bench", ["BenchSupport"] + pipeline("EntitlementStore", "PipelineOperations", "TestSupport") + postgresAndLogging),
    ("customer-api-bench", ["BenchSupport"] + pipeline("AppStoreNotifications", "CustomerAPI", "EntitlementStore", "KafkaClient", "TestSupport") + postgresAndLogging + [.product(name: "Crypto", package: "swift-crypto")]),
]

let benchSupportDependencies: [Target.Dependency] = pipeline("AppStoreNotifications", "EntitlementStore", "KafkaClient", "TestSupport") + postgresAndLogging
let benchSupport = Target.target(name: "BenchSupport", dependencies: benchSupportDependencies)

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
            dependencies: [.product(name: "Benchmark", package: "package-benchmark")] + pipeline("AppStoreNotifications", "TestSupport"),
            path: "Benchmarks/Verification",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        // What the process benchmarks share: the stack they start (Sources/BenchSupport).
        benchSupport,
    ] + programs.map { name, dependencies in .executableTarget(name: name, dependencies: dependencies) }
)

// The main package's language settings, for every target here too.
for target in package.targets {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.swiftLanguageMode(.v6))
    target.swiftSettings = settings
}
