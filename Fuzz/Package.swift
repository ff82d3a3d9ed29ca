// swift-tools-version: 6.2
import PackageDescription

/// libFuzzer targets for every parser that sees untrusted bytes (docs/fuzzing.md). A package of its own, built only
/// by `scripts/fuzz.sh` with `-sanitize=fuzzer,address -parse-as-library`, so the instrumentation reaches the
/// dependencies the verifier parses with (swift-certificates, swift-asn1) and never the pipeline's own build.
/// One executable per parser (Sources/<name>/main.swift).
let fuzzTargets = ["FuzzStrictJSON", "FuzzBase64", "FuzzRequestBody", "FuzzVerifier", "FuzzAPIResponses", "FuzzArchivedJWS", "FuzzCustomerPurchase"]
let core = Target.Dependency.product(name: "AppStoreNotifications", package: "appstore-notification-pipeline")

let package = Package(
    name: "Fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "appstore-notification-pipeline", path: ".."),
    ],
    targets: [
        .target(name: "CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer", core, .product(name: "TestSigning", package: "appstore-notification-pipeline")]),
    ] + fuzzTargets.map { name in
        // The App Store Server API's answer decoders are models only (no HTTP client in a fuzz build).
        let models: [Target.Dependency] = name == "FuzzAPIResponses" ? [.product(name: "AppStoreServerAPIModels", package: "appstore-notification-pipeline")] : []
        return .executableTarget(name: name, dependencies: ["FuzzSupport", core] + models)
    }
)

for target in package.targets where target.name != "CLibFuzzer" {
    target.swiftSettings = (target.swiftSettings ?? []) + [.swiftLanguageMode(.v6)]
}
