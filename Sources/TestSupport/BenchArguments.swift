import Foundation

/// A benchmark program's command line (`Benchmarks/`): the positional arguments as `CommandLine.arguments` numbers
/// them (1 is the first), and the usage line printed, with exit 2, when a required one is missing.
public struct BenchArguments: Sendable {
    public let values: [String]

    public init(usage: String, required: Int, _ arguments: [String] = CommandLine.arguments) {
        guard arguments.count > required else {
            print("usage: " + usage)
            exit(2)
        }
        values = arguments
    }

    public var count: Int { values.count }
    public subscript(index: Int) -> String { values[index] }
    public func contains(_ value: String) -> Bool { values.contains(value) }

    /// The number at `index`, or `fallback` when it is absent or not a number.
    public func int(_ index: Int, default fallback: Int) -> Int {
        index < values.count ? Int(values[index]) ?? fallback : fallback
    }
}

/// The figures a benchmark program prints: durations in milliseconds, percentiles, one decimal.
public enum BenchFigures {
    public static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    /// The value below which `fraction` of `values` lie (nearest rank); NaN for none.
    public static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
    }

    public static func format(_ value: Double) -> String { String(format: "%.1f", value) }

    /// `count` GETs of `route` on `port` over `connections` keep-alive connections: each one's latency in ms, and the
    /// requests a second over the whole run. Any answer but 200 stops the run with its status.
    public static func gets(port: Int, route: String, headers: [String: String], connections: Int, count: Int) async throws -> (latencies: [Double], perSecond: Double) {
        let started = ContinuousClock.now
        let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
            for _ in 0..<connections {
                group.addTask {
                    let reader = HTTPTestConnection(port: port)
                    var samples: [Double] = []
                    for _ in 0..<(count / connections) {
                        let begin = ContinuousClock.now
                        let response = try await reader.send(method: "GET", path: route, headers: headers)
                        guard response.status == 200 else { throw HTTPTestConnection.Failure(description: "\(route) answered \(response.status)") }
                        samples.append(milliseconds(ContinuousClock.now - begin))
                    }
                    return samples
                }
            }
            var all: [Double] = []
            for try await samples in group { all += samples }
            return all
        }
        return (latencies, Double(latencies.count) / (milliseconds(ContinuousClock.now - started) / 1000))
    }
}
