/// W3C Trace Context's `traceparent` (`00-<trace id>-<parent id>-<flags>`), as far as we read it ourselves: the name
/// every carrier uses (Kafka record headers, HTTP headers), and the trace id that tables keep and the console links.
public enum TraceParent {
    /// The header (and carrier key) name.
    public static let header = "traceparent"

    /// The 32 lowercase hex digits of the trace id, or nil when `traceparent` is not of that shape.
    public static func traceId(_ traceparent: String) -> String? {
        let parts = traceparent.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, isTraceId(parts[1]) else { return nil }
        return String(parts[1])
    }

    /// Whether `text` is a valid trace id: 32 lowercase hex digits, not all zero.
    public static func isTraceId(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 32 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) } && text.utf8.contains { $0 != 48 }
    }
}
