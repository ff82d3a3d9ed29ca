/// Text that came from a request (a JSON key, an `alg`, a bundle id, a header value) on its way into a log
/// line, an error reason, a dead-letter header or a terminal: escaped and bounded, never echoed.
///
/// An unauthenticated POST decides these bytes. Unescaped, a newline forges a log line and an ESC sequence
/// drives the operator's terminal; unbounded, a 190 KB `alg` becomes a 190 KB log line and header.
public enum UntrustedText {
    /// `text` in double quotes, escaped, cut after `limit` characters with a marker saying how much was cut:
    /// `"abc\n\u{1B}[31m…"(+190012 characters)`.
    public static func quoted(_ text: some StringProtocol, limit: Int = 40) -> String {
        "\"" + escaped(text, limit: limit, quote: true) + "\""
    }

    /// `text` with control characters (C0, DEL, C1), line and paragraph separators, bidirectional overrides and
    /// backslashes escaped; cut after `limit` characters with a marker. Escaping twice escapes the backslashes
    /// again; printable text passes unchanged.
    public static func escaped(_ text: some StringProtocol, limit: Int = 512, quote: Bool = false) -> String {
        var result = ""
        var count = 0
        var cut = 0
        for scalar in text.unicodeScalars {
            if count >= limit {
                cut += 1
                continue
            }
            count += 1
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case "\\": result += quote ? "\\\\" : "\\"
            case "\"" where quote: result += "\\\""
            default:
                if needsEscape(scalar) {
                    result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        if cut > 0 { result += "…(+\(cut) characters)" }
        return result
    }

    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F: true  // C0, DEL, C1 (ESC is 0x1B; 0x9B is the one-byte CSI)
        case 0x2028, 0x2029: true  // line and paragraph separators
        case 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F: true  // bidirectional controls (Trojan Source)
        case 0xFEFF: true
        default: false
        }
    }
}
