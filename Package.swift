// swift-tools-version: 6.2
import PackageDescription

/// The Swift server ecosystem's products, by the name the targets below list them under.
let argumentParser: Target.Dependency = .product(name: "ArgumentParser", package: "swift-argument-parser")
let asyncHTTPClient: Target.Dependency = .product(name: "AsyncHTTPClient", package: "async-http-client")
let crypto: Target.Dependency = .product(name: "Crypto", package: "swift-crypto")
let httpTypes: Target.Dependency = .product(name: "HTTPTypes", package: "swift-http-types")
let hummingbird: Target.Dependency = .product(name: "Hummingbird", package: "hummingbird")
let hummingbirdCore: Target.Dependency = .product(name: "HummingbirdCore", package: "hummingbird")
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let metrics: Target.Dependency = .product(name: "Metrics", package: "swift-metrics")
let nioCore: Target.Dependency = .product(name: "NIOCore", package: "swift-nio")
let nioHTTP1: Target.Dependency = .product(name: "NIOHTTP1", package: "swift-nio")
let nioHTTPTypesHTTP1: Target.Dependency = .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras")
let nioPosix: Target.Dependency = .product(name: "NIOPosix", package: "swift-nio")
let openAPIHummingbird: Target.Dependency = .product(name: "OpenAPIHummingbird", package: "swift-openapi-hummingbird")
let openAPIRuntime: Target.Dependency = .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime")
let postgresNIO: Target.Dependency = .product(name: "PostgresNIO", package: "postgres-nio")
let prometheus: Target.Dependency = .product(name: "Prometheus", package: "swift-prometheus")
let serviceLifecycle: Target.Dependency = .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let swiftASN1: Target.Dependency = .product(name: "SwiftASN1", package: "swift-asn1")
let mustache: Target.Dependency = .product(name: "Mustache", package: "swift-mustache")
let bcrypt: Target.Dependency = .product(name: "HummingbirdBcrypt", package: "hummingbird-auth")
let x509: Target.Dependency = .product(name: "X509", package: "swift-certificates")
let instrumentation: Target.Dependency = .product(name: "Instrumentation", package: "swift-distributed-tracing")
let tracing: Target.Dependency = .product(name: "Tracing", package: "swift-distributed-tracing")
let otel: Target.Dependency = .product(name: "OTel", package: "swift-otel")

let package = Package(
    name: "appstore-notification-pipeline",
    platforms: [.macOS(.v15)],
    // The libraries other packages use: the core and the adapters, and, for the benchmarks package (Benchmarks/, a
    // path dependency on this one) and other tools, the API client, two services and the test material.
    products: [
        "AppStoreNotifications", "KafkaClient", "EntitlementStore", "EntitlementEvents", "AppStoreServerAPI", "AppStoreServerAPIModels",
        "CustomerAPI", "Console", "SubscriptionMetrics", "PipelineOperations", "TestSupport", "TestSigning", "BookSeeding",
    ].map { Product.library(name: $0, targets: [$0]) } + [
        .executable(name: "pipelinectl", targets: ["pipelinectl"]),
        .executable(name: "ingest", targets: ["ingest"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // Already in the graph through Hummingbird: named here because ingest's connection guard is a NIO handler.
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.34.1"),
        // The App Store Server API client's HTTP.
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // The customer API's types and routes, generated from docs/customer-api.yaml (scripts/generate-customer-api.sh).
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        .package(url: "https://github.com/hummingbird-project/swift-openapi-hummingbird.git", from: "2.1.0"),
        // The operator console: templates that escape by default, and bcrypt for operators' passwords.
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        // Tracing: the API every module instruments with, and its OTLP/HTTP exporter (ServiceRuntime alone imports
        // OTel; its gRPC exporter is not built).
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // MARK: - Configuration: under everything, Foundation only (the environment reader, one ConfigurationError,
        // durations as operators write them)
        .target(name: "PipelineConfiguration"),
        // MARK: - Core: pure, no I/O
        .target(
            name: "AppStoreNotifications",
            dependencies: [crypto, x509, swiftASN1]
        ),
        // MARK: - Kafka: the only importer of the C library
        .systemLibrary(
            name: "CRDKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        .target(
            name: "KafkaClient",
            dependencies: ["CRDKafka", "PipelineConfiguration", instrumentation, logging, metrics, serviceLifecycle]
        ),
        // MARK: - PostgreSQL: migrations, dedupe ledger, entitlement and transaction upserts
        .target(
            name: "EntitlementStore",
            dependencies: ["AppStoreNotifications", "PipelineConfiguration", crypto, postgresNIO, logging, metrics, serviceLifecycle]
        ),
        // MARK: - Apple's App Store Server API: its answers' models (pure: the fuzz targets link them), and the client
        // (JWT auth, typed errors, retries, rate limits)
        // Offers: the signatures StoreKit takes from a server, as Apple's library creates them (pure)
        .target(
            name: "AppStoreOffers",
            dependencies: ["AppStoreNotifications", crypto]
        ),
        .target(
            name: "AppStoreServerAPIModels",
            dependencies: ["AppStoreNotifications"]
        ),
        .target(
            name: "AppStoreServerAPI",
            dependencies: ["AppStoreServerAPIModels", "AppStoreNotifications", asyncHTTPClient, crypto, logging, nioCore, nioHTTP1, tracing]
        ),
        // The App Store Server API budget every process shares, in PostgreSQL: lanes, grants, Apple's pauses
        .target(
            name: "AppStoreBudget",
            dependencies: ["AppStoreServerAPI", "EntitlementStore", logging, metrics, postgresNIO]
        ),
        // MARK: - Entitlement events: the outbox relay and the CloudEvents record shape
        .target(
            name: "EntitlementEvents",
            dependencies: [
                "AppStoreNotifications", "EntitlementStore", "KafkaClient", "ServiceRuntime", logging, postgresNIO, prometheus,
                serviceLifecycle, tracing,
            ]
        ),
        // MARK: - Subscription metrics: the metric functions over the stored book, the product catalog, exchange rates
        .target(
            name: "SubscriptionMetrics",
            dependencies: ["EntitlementStore", postgresNIO, logging]
        ),
        // MARK: - The customer API (the app backend's API): keys, purchases, lookups; server code generated from its spec
        .target(
            name: "CustomerAPI",
            dependencies: ["AppStoreOffers", "NotificationRecords", "SharedSettings", 
                "AppStoreNotifications", "AppStoreServerAPI", "EntitlementStore", "KafkaClient", "ServiceRuntime",
                crypto, hummingbird, httpTypes, logging, metrics, openAPIRuntime, openAPIHummingbird, postgresNIO,
                prometheus, serviceLifecycle,
            ]
        ),
        // MARK: - Webhooks: entitlement events delivered to HTTP endpoints (Standard Webhooks)
        .target(
            name: "Webhooks",
            dependencies: ["SharedSettings", 
                "AppStoreNotifications", "EntitlementEvents", "EntitlementStore", "KafkaClient", "ServiceRuntime",
                asyncHTTPClient, crypto, hummingbird, logging, nioPosix, postgresNIO, prometheus, serviceLifecycle, tracing,
            ]
        ),
        // MARK: - The operator console: a customer's whole story, dead letters, actions with their audit
        .target(
            name: "Console",
            dependencies: ["SharedSettings", 
                "AppStoreNotifications", "AppStorePull", "AppStoreServerAPI", "EntitlementStore", "KafkaClient", "ServiceRuntime", bcrypt, hummingbird,
                httpTypes, logging, mustache, nioPosix, postgresNIO, prometheus, serviceLifecycle, x509,
            ]
        ),
        // MARK: - What every process runs on, no domain module: the service starter, ops routes and health, the HTTP
        // connection guard, tracing
        .target(
            name: "ServiceRuntime",
            dependencies: [
                "PipelineConfiguration", hummingbird, hummingbirdCore, nioCore, nioHTTP1, nioHTTPTypesHTTP1, httpTypes, logging,
                metrics, otel, prometheus, serviceLifecycle, tracing,
            ]
        ),
        // The settings every process that verifies or stores notifications shares (apps, roots, PostgreSQL, Kafka,
        // Apple's API key, the erasure key, online revocation checks).
        .target(
            name: "SharedSettings",
            dependencies: [
                "AppStoreBudget", "AppStoreNotifications", "AppStoreServerAPI", "EntitlementStore", "KafkaClient", "NotificationRecords",
                "PipelineConfiguration", asyncHTTPClient, logging, nioCore, postgresNIO, serviceLifecycle,
            ]
        ),
        // The notifications topic's record contract: the one place records for it (and its dead letters) are built.
        .target(
            name: "NotificationRecords",
            dependencies: ["AppStoreNotifications", "EntitlementStore", "KafkaClient", "PipelineConfiguration", tracing]
        ),
        // MARK: - The services and features, one concern each
        // ingest: Apple's POST → shape check → the notifications topic, 200 after the broker's acknowledgement.
        .target(
            name: "NotificationIngest",
            dependencies: ["NotificationRecords", 
                "AppStoreNotifications", "KafkaClient", "ServiceRuntime", hummingbird, hummingbirdCore, httpTypes,
                logging, prometheus, serviceLifecycle, tracing,
            ]
        ),
        // The worker: verify, dedupe, the one transaction, dead letters, the events relay, the contradiction healer.
        .target(
            name: "NotificationWorker",
            dependencies: ["SharedSettings", 
                "AppStoreBudget", "AppStoreNotifications", "AppStorePull", "AppStoreServerAPI", "EntitlementEvents", "EntitlementStore",
                "KafkaClient", "ServiceRuntime", "SubscriptionMetrics", hummingbird, logging, metrics, prometheus, postgresNIO,
                serviceLifecycle, tracing,
            ]
        ),
        // The pull side: backfill (Get Notification History), reconcile and import (statuses, transaction history),
        // the test notification's round trip. Everything pulled goes through the notifications topic.
        .target(
            name: "AppStorePull",
            dependencies: ["NotificationRecords", 
                "AppStoreNotifications", "AppStoreServerAPI", "EntitlementStore", "KafkaClient", "ServiceRuntime",
                logging,
            ]
        ),
        // Operator tools: dead letters and their re-drive, reading topics, pipelinectl's configuration.
        .target(
            name: "PipelineOperations",
            dependencies: ["SharedSettings", "NotificationRecords", 
                "AppStoreNotifications", "AppStoreServerAPI", "EntitlementEvents", "EntitlementStore", "KafkaClient",
                "ServiceRuntime", logging, postgresNIO,
            ]
        ),
        // MARK: - Test material minted at run time
        // The test PKI and minted notifications: the core and the crypto packages only (the fuzz targets link it).
        .target(
            name: "TestSigning",
            dependencies: ["AppStoreNotifications", crypto, x509, swiftASN1]
        ),
        // Fakes and clients for process tests (re-exports TestSigning).
        .target(
            name: "TestSupport",
            dependencies: [
                "AppStoreNotifications", "AppStoreServerAPI", "TestSigning", asyncHTTPClient, hummingbird, crypto,
                x509, swiftASN1,
            ]
        ),
        // MARK: - Executables: compose only
        .executableTarget(
            name: "pipelinectl",
            dependencies: [
                "AppStoreBudget", "AppStoreNotifications", "AppStoreOffers", "Console", "CustomerAPI", "AppStorePull", "EntitlementEvents", "NotificationIngest",
                "NotificationWorker", "PipelineOperations", "ServiceRuntime", "SubscriptionMetrics", "Webhooks", argumentParser,
            ]
        ),
        .executableTarget(
            name: "ingest",
            dependencies: ["NotificationIngest", "ServiceRuntime"]
        ),
        .executableTarget(
            name: "worker",
            dependencies: ["NotificationWorker", "ServiceRuntime"]
        ),
        .executableTarget(
            name: "customer-api",
            dependencies: ["CustomerAPI", "ServiceRuntime"]
        ),
        .executableTarget(
            name: "console",
            dependencies: ["Console", "ServiceRuntime"]
        ),
        .executableTarget(
            name: "webhooks",
            dependencies: ["Webhooks", "ServiceRuntime"]
        ),
        .executableTarget(
            name: "fake-appstore-api",
            dependencies: ["AppStoreNotifications", "TestSupport", hummingbird]
        ),
        .executableTarget(
            name: "demo-notifications",
            dependencies: ["AppStoreNotifications", "TestSupport"]
        ),
        // MARK: - Tests
        // What the process tests share: scenes (a broker topic, a database, worker and pipelinectl processes), the fake
        // Apple's fixture, the suite gates. A library only tests link; never a product's dependency.
        // The store tier: a fresh migrated database per test, the suite gates. PostgreSQL and the schema only.
        .target(
            name: "StoreTestSupport",
            dependencies: ["AppStoreNotifications", "EntitlementStore", "TestGates", "TestSigning", "TestSupport", logging, postgresNIO]
        ),
        .target(name: "TestGates", dependencies: ["TestSupport"]),
        // The synthetic book through the worker's store path (docs/scale.md): the seed tool and its test.
        .target(name: "BookSeeding", dependencies: ["AppStoreNotifications", "EntitlementStore", "TestSigning", logging, postgresNIO]),
        .target(
            name: "BrokerTestSupport",
            dependencies: ["KafkaClient", "TestGates", "TestSupport", logging]
        ),
        .target(
            name: "PipelineTestSupport",
            dependencies: ["StoreTestSupport", "TestGates", 
                "AppStoreNotifications", "AppStoreServerAPI", "AppStorePull", "CustomerAPI", "EntitlementEvents",
                "EntitlementStore", "KafkaClient", "NotificationIngest", "NotificationWorker", "PipelineOperations",
                "ServiceRuntime", "SubscriptionMetrics", "Webhooks", "Console", "TestSupport", postgresNIO,
            ]
        ),
        .testTarget(
            name: "AppStoreNotificationsTests",
            // The OCSP test responder (TestOCSPResponder.swift, `@testable import X509`) and the worker process test
            // that uses it live here: test-only code no release build compiles.
            dependencies: [
                "AppStoreNotifications", "TestGates", "TestSupport", "PipelineTestSupport", "StoreTestSupport", x509, swiftASN1, crypto, hummingbird, logging, nioCore, postgresNIO,
            ]
        ),
        .testTarget(
            name: "EntitlementStoreTests",
            dependencies: ["EntitlementStore", "AppStoreNotifications", "BookSeeding", "PipelineOperations", "ServiceRuntime", "TestGates", "TestSupport", "StoreTestSupport", "PipelineTestSupport", postgresNIO]
        ),
        .testTarget(
            name: "KafkaClientTests",
            dependencies: ["KafkaClient", "BrokerTestSupport", "TestGates", "TestSupport", logging]
        ),
    ]
)

// A test target per service and feature module (Tests/<Module>Tests), and the end-to-end one: each links the shared
// test library, which brings every module a process test drives.
for name in ["AppStoreOffersTests", "AppStoreServerAPITests", "NotificationIngestTests", "NotificationWorkerTests", "AppStorePullTests", "PipelineOperationsTests", "SubscriptionMetricsTests", "EntitlementEventsTests", "CustomerAPITests", "WebhooksTests", "ConsoleTests", "EndToEndTests"] {
    let module = String(name.dropLast("Tests".count))
    let underTest: [Target.Dependency] = module == "EndToEnd" ? [] : [.target(name: module)]
    let extra: [Target.Dependency] = switch name {
    // In-process router tests: Hummingbird's test client, and the in-memory tracer for what spans record.
    case "CustomerAPITests": [
        .product(name: "HummingbirdTesting", package: "hummingbird"), .product(name: "InMemoryTracing", package: "swift-distributed-tracing"), "ServiceRuntime",
    ]
    // In-process router tests (Hummingbird's test client): the console's pages, the ops routes every service serves.
    case "ConsoleTests", "EndToEndTests": [.product(name: "HummingbirdTesting", package: "hummingbird")]
    // The shared App Store budget, driven by in-process participants beside real pipelinectl processes.
    case "AppStorePullTests": ["AppStoreBudget"]
    default: []
    }
    package.targets.append(.testTarget(name: name, dependencies: underTest + ["StoreTestSupport", "PipelineTestSupport", "TestGates", postgresNIO] + extra))
}

// One place turns on the language features every target builds with.
for target in package.targets where target.type != .system {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.swiftLanguageMode(.v6))
    target.swiftSettings = settings
}
