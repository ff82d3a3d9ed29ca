#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// An App Store date: milliseconds since 1970-01-01T00:00:00Z, as Apple sends it.
///
/// Kept as the exact integer (not `Date`, a `Double` of seconds) so that values round-trip bit for bit and
/// comparisons of `signedDate`s, which order our upserts, are exact.
public struct Timestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var millisecondsSince1970: Int64

    public init(millisecondsSince1970: Int64) {
        self.millisecondsSince1970 = millisecondsSince1970
    }

    public init(_ date: Date) {
        self.millisecondsSince1970 = Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    public var date: Date { Date(timeIntervalSince1970: Double(millisecondsSince1970) / 1000) }

    public init(from decoder: any Decoder) throws {
        self.millisecondsSince1970 = try decoder.singleValueContainer().decode(Int64.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(millisecondsSince1970)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSince1970 < rhs.millisecondsSince1970
    }

    public var description: String { date.formatted(.iso8601) }
}
