import AppStoreBudget
import AppStoreServerAPI
import ArgumentParser
import Foundation
import AppStoreNotifications

/// `pipelinectl appstore`: the App Store Server API as every process shares it.
struct AppStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appstore", abstract: "The App Store Server API budget every process shares.", subcommands: [Budget.self])

    struct Budget: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "budget",
            abstract: "Each bucket's rate, debt and pause, and the calls waiting by lane (docs/appstore-budget.md).",
            discussion: """
                A bucket is one app, environment and endpoint class (APPSTORE_API_RATE sets the rates). Debt: how far
                ahead the schedule is already leased (what a new call of the lowest lanes waits behind). Paused: Apple
                answered 429 or 503 with Retry-After, and no process calls that class until then. Lanes, most urgent
                first: \(AppStoreAPILane.allCases.map(\.rawValue).joined(separator: ", ")); their queues are what each
                process reported in the last \(Int(BudgetReport.freshness)) s.
                """)

        @OptionGroup var connection: ConnectionOptions
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let report = try await connection.configuration().withStore(logger: toolLogger) { store in
                try await BudgetReport.read(client: store.client, logger: toolLogger)
            }
            let lanes = AppStoreAPILane.allCases.map(\.rawValue)
            func number(_ value: Double) -> JSONValue { .number(JSONNumber(literal: String(format: "%.3f", value))) }
            if json {
                printJSON(.array(report.buckets.map { bucket in
                    .object(JSONObject([
                        "bundleId": .string(bucket.bundleId), "environment": .string(bucket.environment), "class": .string(bucket.endpointClass),
                        "rate": number(bucket.rate), "debtSeconds": number(bucket.debtSeconds), "pausedForSeconds": bucket.pausedForSeconds.map(number) ?? .null,
                        "pauseReason": jsonValue(bucket.pauseReason), "pauses": jsonValue(bucket.pauses), "granted": jsonValue(bucket.granted),
                        "lanes": .object(JSONObject(members: lanes.map { name in
                            let lane = bucket.lanes.first { $0.lane == name }
                            return JSONObject.Member(key: name, value: .object(JSONObject([
                                "waiting": jsonValue(lane?.waiting ?? 0), "oldestWaitSeconds": number(lane?.oldestWaitSeconds ?? 0),
                                "processes": jsonValue(lane?.processes ?? 0),
                            ])))
                        })),
                    ]))
                }))
                return
            }
            if report.buckets.isEmpty {
                print("no call to the App Store Server API has taken a turn yet")
                return
            }
            for bucket in report.buckets {
                let paused = bucket.pausedForSeconds.map { String(format: "paused %.1f s more (%@)", $0, bucket.pauseReason ?? "?") } ?? "not paused"
                print("\(bucket.bundleId) \(bucket.environment) \(bucket.endpointClass): \(String(format: "%g", bucket.rate))/s, debt \(String(format: "%.2f", bucket.debtSeconds)) s, \(paused), \(bucket.pauses) pause(s), \(bucket.granted) granted")
                for name in lanes {
                    guard let lane = bucket.lanes.first(where: { $0.lane == name }), lane.waiting > 0 else { continue }
                    print("  \(name): \(lane.waiting) waiting in \(lane.processes) process(es), oldest \(String(format: "%.2f", lane.oldestWaitSeconds)) s")
                }
            }
        }
    }
}
