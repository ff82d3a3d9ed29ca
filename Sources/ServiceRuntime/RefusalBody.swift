import Foundation

/// The JSON shape of every refusal ingest and the ops routes write: `{"error": code, "reason": text}`.
public enum RefusalBody {
    struct Body: Encodable {
        var error: String
        var reason: String
    }

    public static func json(code: String, reason: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Two strings always encode.
        return String(decoding: (try? encoder.encode(Body(error: code, reason: reason))) ?? Data(), as: UTF8.self)
    }
}
