import Foundation

/// The console's paths, built from identifiers (each path segment percent-encoded).
public enum ConsolePaths {
    public static func component(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    public static func subscription(bundle: String, id: String) -> String { "/apps/\(component(bundle))/subscriptions/\(component(id))" }
    public static func customer(bundle: String, customerId: String) -> String { "/apps/\(component(bundle))/customers/\(component(customerId))" }
    public static func notification(_ uuid: String) -> String { "/notifications/\(component(uuid))" }
}
