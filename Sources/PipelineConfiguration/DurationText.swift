/// Durations as operators write them in settings and options: a whole number and a unit, `500ms`, `45s`, `15m`,
/// `12h`, `3d`, `2w`. One parser for every setting and `pipelinectl` option that takes one.
public enum DurationText {
    static let unitMilliseconds: [(suffix: String, milliseconds: Int64)] = [
        ("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000), ("w", 604_800_000),
    ]

    /// The duration in milliseconds; nil unless it is a positive whole number and a known unit, at most 100 000
    /// of the unit (or 100 000 000 milliseconds).
    public static func milliseconds(_ text: String, allowingZero: Bool = false) -> Int64? {
        guard let unit = unitMilliseconds.first(where: { text.hasSuffix($0.suffix) }),
            let value = Int64(text.dropLast(unit.suffix.count)), value > 0 || (allowingZero && value == 0),
            value < (unit.milliseconds == 1 ? 100_000_000 : 100_000)
        else { return nil }
        return value * unit.milliseconds
    }

    /// The duration `text` names (`milliseconds(_:)`); `0s` only when `allowingZero`.
    public static func duration(_ text: String, allowingZero: Bool = false) -> Duration? {
        milliseconds(text, allowingZero: allowingZero).map { .milliseconds($0) }
    }

    /// `duration` as a person writes it: the largest unit that divides it (`90s`, `1500ms`, `0s`).
    public static func text(_ duration: Duration) -> String {
        let milliseconds = duration.wholeMilliseconds
        guard milliseconds > 0 else { return "0s" }
        for unit in unitMilliseconds.reversed() where milliseconds % unit.milliseconds == 0 {
            return "\(milliseconds / unit.milliseconds)\(unit.suffix)"
        }
        return "\(milliseconds)ms"
    }
}

extension Duration {
    /// The whole milliseconds of this duration (rounded toward zero): what librdkafka's, PostgreSQL's and the HTTP
    /// client's millisecond settings take.
    public var wholeMilliseconds: Int64 {
        components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000
    }
}
