/// Durations as operators write them in settings and options: a whole number and a unit, `45s`, `15m`, `12h`,
/// `3d`, `2w`. One parser for every setting and `pipelinectl` option that takes one.
public enum DurationText {
    static let unitMilliseconds: [Character: Int64] = ["s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000]

    /// The duration in milliseconds; nil unless it is a positive number below 100 000 and a known unit.
    public static func milliseconds(_ text: String) -> Int64? {
        guard let unit = text.last.flatMap({ unitMilliseconds[$0] }), let value = Int64(text.dropLast()), value > 0, value < 100_000 else { return nil }
        return value * unit
    }
}
