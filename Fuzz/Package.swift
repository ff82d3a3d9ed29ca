// swift-tools-version: 6.2
import PackageDescription

/// libFuzzer targets for every parser that sees untrusted bytes (docs/fuzzing.md). A package of its own, built only
/// by `scripts/fuzz.sh` with `-sanitize=fuzzer,address -parse-as-library`, so the instrumentation reaches the
/// dependencies the verifier parses with (swift-certificates, swift-asn1) and never the pipeline's own build.
let package = Package(
    name: "Fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "appstore-notification-pipeline", path: ".."),
    ],
    targets: [
        .target(name: "CLibFuzzer"),
        .target(
            name: "FuzzSupport",
            dependencies: [
                "CLibFuzzer",
                .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline"),
                .product(name: "TestSigning", package: "appstore-notification-pipeline"),
            ]
        ),
        .executableTarget(name: "FuzzStrictJSON", dependencies: ["FuzzSupport", .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")]),
        .executableTarget(name: "FuzzBase64", dependencies: ["FuzzSupport", .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")]),
        .executableTarget(name: "FuzzRequestBody", dependencies: ["FuzzSupport", .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")]),
        .executableTarget(name: "FuzzVerifier", dependencies: ["FuzzSupport", .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")]),
        .executableTarget(name: "FuzzAPIResponses", dependencies: ["FuzzSupport", .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")]),
        .executableTarget(name: "FuzzArchivedJWS", dependencies: ["FuzzSupport", .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")]),
        .executableTarget(name: "FuzzCustomerPurchase", dependencies: ["FuzzSupport", .product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")]),
    ]
)

for target in package.targets where target.name != "CLibFuzzer" {
    target.swiftSettings = (target.swiftSettings ?? []) + [.swiftLanguageMode(.v6)]
}
