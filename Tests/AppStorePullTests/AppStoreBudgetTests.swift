import AppStoreBudget
import AppStoreServerAPI
import Foundation
import Logging
import PipelineTestSupport
import PostgresNIO
import Synchronization
import TestGates
import Testing

/// One App Store Server API budget across processes (docs/appstore-budget.md), against the fake Apple enforcing 50
/// requests a second for the app (429 with `Retry-After` past it, counted per wall-clock second): two real
/// `pipelinectl reconcile` sweeps, one killed with SIGKILL mid-run; then eight healing participants (each a budget
/// and a connection pool of its own, as eight workers) and purchase-path lookups beside the surviving sweep.
@Suite("One budget for Apple's API: real processes, the fake Apple at 50 a second", .serialized, .requiresKafkaAndPostgres)
struct AppStoreBudgetTests: ProcessSuite {
    static let rate = 50

    /// What the participants' tasks share.
    final class Shared: Sendable {
        let stop = Atomic<Bool>(false)
        let waits = Mutex<[Double]>([])
        /// Purchase-path lookups that Apple (the fake) answered: none was refused by the budget.
        let answered = Atomic<Int>(0)
    }

    /// A participant with a budget and pool of its own, calling in a loop until `stop`.
    struct Participant {
        let postgres: PostgresClient
        let api: AppStoreServerAPIClient
    }

    @Test("8 healers, 2 sweeps (one killed holding grants) and purchases: never above 50 a second, ≤ 1 429 a second, every purchase lookup answered (figures printed)")
    func sharedBudget() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, withWorker: false)
        let fake = scene.apple.fake
        fake.setRateLimit(perSecond: Self.rate)
        let environment = ["APPSTORE_API_RATE": "\(Self.rate)"]
        func ids(_ prefix: Int, _ count: Int) -> [String] { (0..<count).map { String(prefix * 1_000_000_000_000_000 + $0) } }
        let arguments = { (first: Int) in
            ["reconcile", "--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production", "--wait", "1s", "--json", "--transaction-id"] + ids(first, 1_500)
        }
        let started = Date().timeIntervalSince1970
        let (victim, _) = try scene.start(arguments(5), extra: environment)
        let (sweep, sweepOutput) = try scene.start(arguments(6), extra: environment)
        defer {
            if victim.isRunning { kill(victim.processIdentifier, SIGKILL) }
            if sweep.isRunning { kill(sweep.processIdentifier, SIGKILL) }
        }
        // Both sweeps at work (a loaded machine takes seconds to start them), then one killed while it holds grants,
        // and the survivor calling on after it.
        func calls(_ prefix: String, after time: Double = 0) -> Int {
            fake.requests.count { $0.path.contains("/subscriptions/" + prefix) && $0.at.timeIntervalSince1970 > time }
        }
        let startDeadline = ContinuousClock.now + .seconds(120)
        while calls("5") < 20 || calls("6") < 20, ContinuousClock.now < startDeadline { try await Task.sleep(for: .milliseconds(100)) }
        kill(victim.processIdentifier, SIGKILL)
        let killedAt = Date().timeIntervalSince1970
        let surviveDeadline = ContinuousClock.now + .seconds(60)
        while calls("6", after: killedAt + 0.5) < 20, ContinuousClock.now < surviveDeadline { try await Task.sleep(for: .milliseconds(100)) }
        let afterKill = calls("6", after: killedAt + 0.5)

        // Eight healers, three calls in flight each, and a purchase-path lookup every 100 ms.
        var configuration = scene.apple.configuration()
        try configuration.rateLimits.apply("\(Self.rate)")
        configuration.rateLimits.maximumWait = .seconds(30)
        let participants = (0..<9).map { index in
            let postgres = PostgresClient(configuration: try! PostgresClient.Configuration(url: scene.database), backgroundLogger: ingestTestLogger)
            let budget = SharedRequestBudget(client: postgres, holder: "participant-\(index)", logger: ingestTestLogger)
            return Participant(
                postgres: postgres,
                api: AppStoreServerAPIClient(configuration: configuration, logger: ingestTestLogger, budget: budget, defaultLane: index < 8 ? .healing : .purchase))
        }
        let shared = Shared()
        let healingStarted = Date().timeIntervalSince1970
        var healingStopped = healingStarted
        // The pools run in the outer group until every participant's calls are over (a lease whose pool stopped
        // under it would wait for ever), then the clients shut down and the pools stop.
        await withTaskGroup(of: Void.self) { pools in
            for participant in participants { pools.addTask { await participant.postgres.run() } }
            await withTaskGroup(of: Void.self) { group in
                for (index, participant) in participants.prefix(8).enumerated() {
                    for lane in 0..<3 {
                        group.addTask {
                            var n = 0
                            while !shared.stop.load(ordering: .relaxed) {
                                n += 1
                                _ = try? await participant.api.subscriptionStatuses(bundleId: FakeAppleFixture.bundleId, transactionId: String(8_000_000_000_000_000 + index * 100_000 + lane * 10_000 + n))
                            }
                        }
                    }
                }
                group.addTask {
                    var n = 0
                    while !shared.stop.load(ordering: .relaxed) {
                        n += 1
                        let asked = ContinuousClock.now
                        do {
                            _ = try await participants[8].api.transactionInfo(bundleId: FakeAppleFixture.bundleId, transactionId: String(7_000_000_000_000_000 + n))
                            shared.answered.add(1, ordering: .relaxed)
                        } catch let error as AppStoreServerAPIError where error.httpStatus == 404 {
                            shared.answered.add(1, ordering: .relaxed)  // Apple's answer for an id it does not know
                        } catch {}
                        let waited = ContinuousClock.now - asked
                        shared.waits.withLock { $0.append(Double(waited.components.seconds) + Double(waited.components.attoseconds) / 1e18) }
                        try? await Task.sleep(for: .milliseconds(100))
                    }
                }
                group.addTask {
                    // At least 8 s, and at least 5 purchase-path lookups answered (a loaded machine is slow to make them).
                    let begun = ContinuousClock.now
                    while ContinuousClock.now - begun < .seconds(8) || (shared.answered.load(ordering: .relaxed) < 5 && ContinuousClock.now - begun < .seconds(120)) {
                        try? await Task.sleep(for: .milliseconds(100))
                    }
                    shared.stop.store(true, ordering: .relaxed)
                }
                await group.waitForAll()
            }
            healingStopped = Date().timeIntervalSince1970
            for participant in participants { await participant.api.shutdown() }
            pools.cancelAll()
        }
        // The surviving sweep alone again.
        try await Task.sleep(for: .seconds(3))
        let ended = Date().timeIntervalSince1970
        kill(sweep.processIdentifier, SIGKILL)
        let report = try await TestDatabase.with(scene.database) { client in try await BudgetReport.read(client: client, logger: ingestTestLogger) }

        // Every full second from the sweeps' start (after the processes' own start-up) to the end.
        let counts = fake.requestsPerSecond
        let seconds = (Int64(started) + 3)..<Int64(ended)
        let rates = seconds.map { counts[$0]?.arrived ?? 0 }
        let throttled = seconds.map { counts[$0]?.throttled ?? 0 }
        let log = (try? String(contentsOfFile: sweepOutput, encoding: .utf8).suffix(600)).map(String.init) ?? ""
        let healersStopped = Int64(healingStopped)
        let killSecond = Int64(killedAt)
        let requests = fake.requests.filter { $0.at.timeIntervalSince1970 >= healingStarted + 1 && $0.at.timeIntervalSince1970 < healingStarted + 7 }
        let swept = requests.count { $0.path.contains("/subscriptions/6") }
        let healed = requests.count { $0.path.contains("/subscriptions/8") }
        let waits = shared.waits.withLock { $0 }.sorted()
        let p99 = waits.isEmpty ? .infinity : waits[min(waits.count - 1, Int(Double(waits.count) * 0.99))]
        // The figures (docs/appstore-budget.md): on a quiet machine 50 ± 2 a second throughout, but for the second the
        // eight healers stopped together (their leased schedule, at most the healing lead, went unused); the sweep
        // about 0 of the calls while the healers had work; purchase-path lookups p99 under 200 ms. They depend on the
        // machine having the CPU to ask (a loaded CI machine asks for less): printed, not asserted.
        print("budget figures: requests a second \(rates), 429s a second \(throttled); the kill at second \(killSecond - seconds.lowerBound), the healers stopped at \(healersStopped - seconds.lowerBound)")
        print("budget figures: purchase-path lookups \(waits.count), p50 \(waits.isEmpty ? 0 : waits[waits.count / 2]) s, p99 \(p99) s; in 6 s of healing: healing \(healed), sweep \(swept)")
        // What holds however loaded the machine: never above the budget (Apple's limit) in any second, at most one
        // 429 a second, every purchase-path lookup answered, and the survivor of the kill still calling after it.
        #expect(rates.allSatisfy { $0 <= Self.rate + 2 }, "requests a second: \(rates) (sweep log: \(log))")
        #expect(throttled.allSatisfy { $0 <= 1 }, "429s a second: \(throttled)")
        // (the last may be cut short when the participants' clients shut down at the end)
        #expect(waits.count >= 5 && shared.answered.load(ordering: .relaxed) >= waits.count - 1, "\(waits.count) purchase-path lookups, all answered")
        #expect(afterKill >= 20, "the surviving sweep called on after the kill: \(afterKill)")
        // What an operator sees: the bucket, its rate and what was granted.
        let bucket = report.buckets.first { $0.endpointClass == "subscriptionStatus" && $0.bundleId == FakeAppleFixture.bundleId }
        #expect(bucket?.rate == Double(Self.rate) && (bucket?.granted ?? 0) >= Int64(rates.reduce(0, +)) - 100, "\(String(describing: bucket))")
        await scene.finish()
    }

    @Test("Apple's 429 with Retry-After pauses the bucket for every process: three participants over Apple's limit meet about one 429 per window, the pauses recorded")
    func pauseIsShared() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, withWorker: false)
        let fake = scene.apple.fake
        // Our budget says 50 a second, Apple allows 5: every second ends in a 429 and a pause to the next second
        // (even a loaded machine asks for more than 5 a second).
        fake.setRateLimit(perSecond: 5)
        var configuration = scene.apple.configuration()
        try configuration.rateLimits.apply("50")
        configuration.rateLimits.maximumWait = .seconds(30)
        let pools = (0..<3).map { _ in PostgresClient(configuration: try! PostgresClient.Configuration(url: scene.database), backgroundLogger: ingestTestLogger) }
        let clients = pools.enumerated().map { index, postgres in
            AppStoreServerAPIClient(
                configuration: configuration, logger: ingestTestLogger, budget: SharedRequestBudget(client: postgres, holder: "pause-\(index)", logger: ingestTestLogger),
                defaultLane: .sweep)
        }
        let started = Date().timeIntervalSince1970
        await withTaskGroup(of: Void.self) { group in
            for pool in pools { group.addTask { await pool.run() } }
            for (index, client) in clients.enumerated() {
                group.addTask {
                    for n in 0..<10 {
                        _ = try? await client.subscriptionStatuses(bundleId: FakeAppleFixture.bundleId, transactionId: String(6_100_000_000_000_000 + index * 1_000 + n))
                    }
                }
            }
            for _ in 0..<3 { await group.next() }
            for client in clients { await client.shutdown() }
            group.cancelAll()
        }
        let counts = fake.requestsPerSecond.filter { $0.key >= Int64(started) }
        let throttled = counts.values.map(\.throttled).reduce(0, +)
        let windows = counts.values.filter { $0.throttled > 0 }.count
        let report = try await TestDatabase.with(scene.database) { client in try await BudgetReport.read(client: client, logger: ingestTestLogger) }
        let recorded = report.buckets.first { $0.endpointClass == "subscriptionStatus" }
        print("budget figures: over Apple's limit (5/s, budget 50/s, 3 participants): \(throttled) 429s in \(windows) window(s); per second \(counts.sorted { $0.key < $1.key }.map { "\($0.value.arrived)/\($0.value.throttled)" })")
        // What `pipelinectl appstore budget` shows: the pauses Apple caused, with Apple's answer.
        #expect((recorded?.pauses ?? 0) >= Int64(windows) && recorded?.pauseReason == "429 4290000", "\(String(describing: recorded))")
        // One process's 429 pauses the others before their next call (each reads the pause just before calling):
        // only a call already on its way when Apple answered can meet it too, at most one per participant in a window
        // (measured on a quiet machine: one 429 per window; on a loaded CI machine, where answers take longer, up to 3).
        #expect(throttled <= windows * clients.count && windows >= 1, "\(throttled) 429s in \(windows) window(s): \(counts.sorted { $0.key < $1.key }.map { "\($0.value)" })")
        #expect(counts.values.allSatisfy { $0.arrived - $0.throttled <= 5 }, "served beyond Apple's limit")
        await scene.finish()
    }
    @Test("lanes: with the schedule leased ahead, sweep to healing calls are refused rather than queue behind it; a purchase-path call takes the turn after it")
    func laneLeads() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, withWorker: false)
        let pool = PostgresClient(configuration: try PostgresClient.Configuration(url: scene.database), backgroundLogger: ingestTestLogger)
        let budget = SharedRequestBudget(client: pool, holder: "lanes", logger: ingestTestLogger)
        let bucket = AppStoreBudgetBucket(bundleId: "com.example.lanes", environment: "Production", endpointClass: "subscriptionStatus")
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await pool.run() }
            try await budget.acquire(bucket, lane: .sweep, perSecond: 50, maximumWait: .seconds(1))  // the row exists
            // Other processes leased the next 30 seconds: every lane below the purchase lane (lead at most 160 ms)
            // is refused at once rather than queue behind them, however slow this machine is.
            func lease(_ seconds: Int) async throws -> Double {
                let rows = try await pool.query(PostgresQuery(unsafeSQL: """
                    UPDATE appstore_api_budget SET next_at = clock_timestamp() + interval '\(seconds) seconds' WHERE bundle_id = 'com.example.lanes'
                    RETURNING extract(epoch FROM next_at)::float8
                    """), logger: ingestTestLogger)
                var end = 0.0
                for try await value in rows.decode(Double.self) { end = value }
                return end
            }
            _ = try await lease(30)
            for lane in [AppStoreAPILane.sweep, .backfill, .console, .healing] {
                await #expect(throws: AppStoreBudgetRefusal.self, "\(lane) waits for the schedule to come within its lead") {
                    try await budget.acquire(bucket, lane: lane, perSecond: 50, maximumWait: .seconds(2))
                }
            }
            // A purchase-path call with a second leased ahead (within its 2 s lead) leases the turn after it at once.
            let leasedUntil = try await lease(1)
            try await budget.acquire(bucket, lane: .purchase, perSecond: 50, maximumWait: .seconds(10))
            let after = try await scene.query("SELECT extract(epoch FROM clock_timestamp())::float8", as: Double.self).first ?? 0
            #expect(after >= leasedUntil, "the purchase left after the leased second, not inside it: \(after) < \(leasedUntil)")
            let next = try await scene.query("SELECT extract(epoch FROM next_at)::float8 FROM appstore_api_budget WHERE bundle_id = 'com.example.lanes'", as: Double.self)
            #expect((next.first ?? 0) > leasedUntil, "the purchase's grant extended the schedule past the leased second: \(next) vs \(leasedUntil)")
            group.cancelAll()
        }
        await scene.finish()
    }
}

