import AppStoreNotifications
import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import TestSupport

/// What erasures cost the workers (issue 51: "one erasure stalls every tenant"): a writer stores verified
/// notifications at a fixed rate, as a worker's batches do, first alone, then with an eraser erasing customers at a
/// fixed rate beside it; prints each phase's batch latency (p50, p99, max) and the ratio of the p99s, and the
/// erasures' own latency. The reference is the first phase, measured in the same run on the same database.
///
/// Creates a database of its own, migrates it, stores SEED subscriptions' lifecycles (the customers to erase), then
/// runs the two phases of SECONDS each: batches of BATCH notifications every BATCH/RATE seconds (500 a second by
/// default: the load), erasures at ERASURES a second (10 by default) by app account token.
///
/// Usage: erasure-bench POSTGRES_URL [SECONDS=20] [RATE=500] [ERASURES=10] [BATCH=50] [SEED=1000]
@main
struct ErasureBench {
    static func main() async throws {
        let arguments = BenchArguments(usage: "erasure-bench POSTGRES_URL [SECONDS] [RATE] [ERASURES] [BATCH] [SEED]", required: 1, CommandLine.arguments)
        let postgresURL = arguments[1]
        let seconds = arguments.int(2, default: 20)
        let rate = arguments.int(3, default: 500)
        let erasuresPerSecond = arguments.int(4, default: 10)
        let batchSize = arguments.int(5, default: 50)
        let seed = arguments.int(6, default: 1_000)
        var logger = Logger(label: "erasure-bench")
        logger.logLevel = .critical

        // Test material, verified once (unmeasured): the customers to erase, and two phases' worth of new notifications.
        let minted = try MintedVerification()
        let perPhase = rate * seconds
        func verified(_ events: [NotificationMinter.SubscriptionEvent], offset: Int64) async throws -> [StoredNotification] {
            var stored: [StoredNotification] = []
            for (index, event) in events.enumerated() {
                let signed = minted.minter.signedNotification(event)
                stored.append(StoredNotification(
                    verified: try await minted.verifier.verifyNotification(signed), signedPayload: signed, kafkaTopic: "bench", kafkaPartition: 0,
                    kafkaOffset: offset + Int64(index), receivedAt: Timestamp(millisecondsSince1970: event.signedDate)))
            }
            return stored
        }
        let seedEvents = NotificationMinter.lifecycleEvents(subscriptions: seed, firstSubscription: 0)
        let tokens = Array(Set(seedEvents.map(\.appAccountToken).filter { !$0.isEmpty })).sorted()
        func phaseEvents(_ first: Int) -> [NotificationMinter.SubscriptionEvent] {
            var events: [NotificationMinter.SubscriptionEvent] = []
            var subscription = first
            while events.count < perPhase {
                events += NotificationMinter.lifecycleEvents(subscriptions: 100, firstSubscription: subscription)
                subscription += 100
            }
            return Array(events.prefix(perPhase))
        }
        print("minting and verifying \(seedEvents.count) seed and \(2 * perPhase) phase notifications …")
        let seeded = try await verified(seedEvents, offset: 0)
        let alone = try await verified(phaseEvents(100_000), offset: 1_000_000)
        let beside = try await verified(phaseEvents(200_000), offset: 2_000_000)

        let database = "bench_erasure_\(UUID().uuidString.prefix(8).lowercased())"
        let admin = PostgresClient(configuration: try .init(url: postgresURL), backgroundLogger: logger)
        var configuration = try PostgresClient.Configuration(url: postgresURL)
        configuration.database = database
        configuration.options.maximumConnections = 8
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let key = try ErasureKey(secret: String(repeating: "b", count: 48))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await admin.run() }
            group.addTask { await client.run() }
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"), logger: logger)
            let store = EntitlementStore(client: client, logger: logger, erasureKey: key)
            try await store.migrate()
            for start in stride(from: 0, to: seeded.count, by: 500) { _ = try await store.store(Array(seeded[start..<min(start + 500, seeded.count)])) }
            // One erasure before the phases, so both run with the key's entries in place (the suppression check's cost
            // is in the reference too; only the erasures' locks differ).
            let erasures = ErasureStore(client: client, logger: logger)
            _ = try await erasures.erase(ErasureRequest(subject: ErasureSubject(.appAccountToken, tokens[0], bundleId: minted.minter.bundleId), reason: "bench", requestedBy: "bench"), key: key)

            func runPhase(_ records: [StoredNotification], erasing: ArraySlice<String>?) async throws -> (batches: [Duration], erasures: [Duration]) {
                let interval = Duration.seconds(Double(batchSize) / Double(rate))
                async let erased: [Duration] = {
                    guard let erasing else { return [] }
                    var latencies: [Duration] = []
                    let every = Duration.seconds(1.0 / Double(erasuresPerSecond))
                    var next = ContinuousClock.now
                    for token in erasing {
                        try await Task.sleep(until: next)
                        next += every
                        let started = ContinuousClock.now
                        _ = try await erasures.erase(
                            ErasureRequest(subject: ErasureSubject(.appAccountToken, token, bundleId: minted.minter.bundleId), reason: "bench", requestedBy: "bench"),
                            key: key)
                        latencies.append(ContinuousClock.now - started)
                    }
                    return latencies
                }()
                var latencies: [Duration] = []
                var next = ContinuousClock.now
                for start in stride(from: 0, to: records.count, by: batchSize) {
                    try await Task.sleep(until: next)
                    next += interval
                    let started = ContinuousClock.now
                    _ = try await store.store(Array(records[start..<min(start + batchSize, records.count)]))
                    latencies.append(ContinuousClock.now - started)
                }
                return (latencies, try await erased)
            }
            print("phase 1: \(rate) notifications/s in batches of \(batchSize), \(seconds) s, no erasure")
            let reference = try await runPhase(alone, erasing: nil)
            let count = min(tokens.count - 1, erasuresPerSecond * seconds)
            print("phase 2: the same load beside \(erasuresPerSecond) erasures/s (\(count) customers)")
            let measured = try await runPhase(beside, erasing: tokens[1...count])
            func ms(_ duration: Duration) -> Double { Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15 }
            func percentile(_ values: [Duration], _ p: Double) -> Double {
                let sorted = values.map(ms).sorted()
                guard !sorted.isEmpty else { return 0 }
                return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
            }
            func line(_ name: String, _ values: [Duration]) -> String {
                String(format: "%@: %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms", name, values.count, percentile(values, 0.5), percentile(values, 0.99), values.map(ms).max() ?? 0)
            }
            print(line("batches alone            ", reference.batches))
            print(line("batches beside erasures  ", measured.batches))
            print(line("erasures                 ", measured.erasures))
            print(String(format: "batch latency p99 beside erasures / alone: %.2f (target < 2)", percentile(measured.batches, 0.99) / max(0.001, percentile(reference.batches, 0.99))))
            try await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(database) WITH (FORCE)"), logger: logger)
            group.cancelAll()
        }
    }
}
