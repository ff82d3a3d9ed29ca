import AppStoreNotifications
import Foundation

/// Apple's [Retention Messaging API](https://developer.apple.com/documentation/retentionmessaging): the messages and
/// images the App Store may show a subscriber about to cancel, the default message per product and locale, and the
/// URL of our real-time endpoint (`POST /v1/apps/{bundleId}/retention`, docs/offers.md). Identifiers are lowercase
/// UUIDs, as Apple requires.
extension AppStoreServerAPIClient {
    /// [Upload Image](https://developer.apple.com/documentation/retentionmessaging/upload-image): a PNG.
    public func uploadRetentionImage(bundleId: String, imageIdentifier: String, png: [UInt8]) async throws {
        _ = try await call(
            .PUT, "/inApps/v1/messaging/image/" + Self.percentEncoded(imageIdentifier.lowercased()), endpoint: "PUT /inApps/v1/messaging/image/{imageIdentifier}",
            bundleId: bundleId, family: .retentionMessaging, body: nil, rawBody: ("image/png", png))
    }

    /// [Delete Image](https://developer.apple.com/documentation/retentionmessaging/delete-image).
    public func deleteRetentionImage(bundleId: String, imageIdentifier: String) async throws {
        _ = try await call(
            .DELETE, "/inApps/v1/messaging/image/" + Self.percentEncoded(imageIdentifier.lowercased()),
            endpoint: "DELETE /inApps/v1/messaging/image/{imageIdentifier}", bundleId: bundleId, family: .retentionMessaging, body: nil)
    }

    /// [Get Image List](https://developer.apple.com/documentation/retentionmessaging/get-image-list): each image and its state.
    public func retentionImages(bundleId: String) async throws -> [(identifier: String, state: String?)] {
        let object = try await call(
            .GET, "/inApps/v1/messaging/image/list", endpoint: "GET /inApps/v1/messaging/image/list", bundleId: bundleId, family: .retentionMessaging, body: nil)
        guard case .array(let items)? = object["imageIdentifiers"] else { return [] }
        return items.compactMap(\.objectValue).compactMap { item in
            item["imageIdentifier"]?.stringValue.map { ($0, item["imageState"]?.stringValue) }
        }
    }

    /// [Upload Message](https://developer.apple.com/documentation/retentionmessaging/upload-message): its header and body
    /// text, and an image (uploaded before) with its alternative text.
    public func uploadRetentionMessage(
        bundleId: String, messageIdentifier: String, header: String, body: String, image: (identifier: String, altText: String)?
    ) async throws {
        var request = JSONObject(["header": .string(header), "body": .string(body)])
        if let image {
            request["image"] = .object(JSONObject(["imageIdentifier": .string(image.identifier.lowercased()), "altText": .string(image.altText)]))
        }
        _ = try await call(
            .PUT, "/inApps/v1/messaging/message/" + Self.percentEncoded(messageIdentifier.lowercased()),
            endpoint: "PUT /inApps/v1/messaging/message/{messageIdentifier}", bundleId: bundleId, family: .retentionMessaging, body: request)
    }

    /// [Delete Message](https://developer.apple.com/documentation/retentionmessaging/delete-message).
    public func deleteRetentionMessage(bundleId: String, messageIdentifier: String) async throws {
        _ = try await call(
            .DELETE, "/inApps/v1/messaging/message/" + Self.percentEncoded(messageIdentifier.lowercased()),
            endpoint: "DELETE /inApps/v1/messaging/message/{messageIdentifier}", bundleId: bundleId, family: .retentionMessaging, body: nil)
    }

    /// [Get Message List](https://developer.apple.com/documentation/retentionmessaging/get-message-list): each message and its state.
    public func retentionMessages(bundleId: String) async throws -> [(identifier: String, state: String?)] {
        let object = try await call(
            .GET, "/inApps/v1/messaging/message/list", endpoint: "GET /inApps/v1/messaging/message/list", bundleId: bundleId, family: .retentionMessaging,
            body: nil)
        guard case .array(let items)? = object["messageIdentifiers"] else { return [] }
        return items.compactMap(\.objectValue).compactMap { item in
            item["messageIdentifier"]?.stringValue.map { ($0, item["messageState"]?.stringValue) }
        }
    }

    /// [Configure Default Message](https://developer.apple.com/documentation/retentionmessaging/configure-default-message):
    /// the message the App Store shows for `productId` in `locale` when our endpoint gives none.
    public func configureDefaultRetentionMessage(bundleId: String, productId: String, locale: String, messageIdentifier: String) async throws {
        _ = try await call(
            .PUT, "/inApps/v1/messaging/default/" + Self.percentEncoded(productId) + "/" + Self.percentEncoded(locale),
            endpoint: "PUT /inApps/v1/messaging/default/{productId}/{locale}", bundleId: bundleId, family: .retentionMessaging,
            body: JSONObject(["messageIdentifier": .string(messageIdentifier.lowercased())]))
    }

    /// [Delete Default Message](https://developer.apple.com/documentation/retentionmessaging/delete-default-message).
    public func deleteDefaultRetentionMessage(bundleId: String, productId: String, locale: String) async throws {
        _ = try await call(
            .DELETE, "/inApps/v1/messaging/default/" + Self.percentEncoded(productId) + "/" + Self.percentEncoded(locale),
            endpoint: "DELETE /inApps/v1/messaging/default/{productId}/{locale}", bundleId: bundleId, family: .retentionMessaging, body: nil)
    }

    /// [Configure Realtime URL](https://developer.apple.com/documentation/retentionmessaging/configure-realtime-url).
    public func configureRetentionRealtimeURL(bundleId: String, url: String) async throws {
        _ = try await call(
            .PUT, "/inApps/v1/messaging/realtime/url", endpoint: "PUT /inApps/v1/messaging/realtime/url", bundleId: bundleId, family: .retentionMessaging,
            body: JSONObject(["realtimeURL": .string(url)]))
    }

    /// [Get Realtime URL](https://developer.apple.com/documentation/retentionmessaging/get-realtime-url): nil when none is set.
    public func retentionRealtimeURL(bundleId: String) async throws -> String? {
        let object = try await call(
            .GET, "/inApps/v1/messaging/realtime/url", endpoint: "GET /inApps/v1/messaging/realtime/url", bundleId: bundleId, family: .retentionMessaging,
            body: nil)
        return object["realtimeURL"]?.stringValue
    }

    /// [Delete Realtime URL](https://developer.apple.com/documentation/retentionmessaging/delete-realtime-url).
    public func deleteRetentionRealtimeURL(bundleId: String) async throws {
        _ = try await call(
            .DELETE, "/inApps/v1/messaging/realtime/url", endpoint: "DELETE /inApps/v1/messaging/realtime/url", bundleId: bundleId,
            family: .retentionMessaging, body: nil)
    }
}
