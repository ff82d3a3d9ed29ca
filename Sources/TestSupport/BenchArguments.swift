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
