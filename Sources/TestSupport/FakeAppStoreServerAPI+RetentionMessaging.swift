import AppStoreNotifications
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The Retention Messaging API as the fake serves it: images and messages (approved at once, as Sandbox does), default
/// messages per product and locale, the real-time URL. Apple's rules it checks: lowercase UUID identifiers, a PNG
/// image, a header of at most 66 characters and a body of at most 144, an image that exists, a message that exists.
extension FakeAppStoreServerAPI {
    /// What the fake holds of retention messaging.
    public struct RetentionMessaging: Sendable {
        public var images: [String: Int] = [:]  // identifier → bytes
        public var messages: [String: JSONObject] = [:]
        public var defaults: [String: String] = [:]  // "productId/locale" → message identifier
        public var realtimeURL: String?
    }

    public var retentionMessaging: RetentionMessaging { retention.withLock { $0 } }

    func registerRetentionMessaging(on router: Router<BasicRequestContext>) {
        router.put("/inApps/v1/messaging/image/:id") { request, context in try await self.uploadImage(request, id: context.parameters.get("id") ?? "") }
        router.delete("/inApps/v1/messaging/image/:id") { request, context in
            self.retentionAnswer(request) { state in
                guard let id = context.parameters.get("id"), state.images.removeValue(forKey: id) != nil else { return Self.appleError(.notFound, 4_040_014, "Image not found.") }
                return Response(status: .ok)
            }
        }
        router.get("/inApps/v1/messaging/image/list") { request, _ in
            self.retentionAnswer(request) { state in
                Self.json(.ok, JSONObject(["imageIdentifiers": .array(state.images.keys.sorted().map {
                    .object(JSONObject(["imageIdentifier": .string($0), "imageState": .string("APPROVED")]))
                })]))
            }
        }
        router.put("/inApps/v1/messaging/message/:id") { request, context in try await self.uploadMessage(request, id: context.parameters.get("id") ?? "") }
        router.delete("/inApps/v1/messaging/message/:id") { request, context in
            self.retentionAnswer(request) { state in
                guard let id = context.parameters.get("id"), state.messages.removeValue(forKey: id) != nil else { return Self.appleError(.notFound, 4_040_015, "Message not found.") }
                return Response(status: .ok)
            }
        }
        router.get("/inApps/v1/messaging/message/list") { request, _ in
            self.retentionAnswer(request) { state in
                Self.json(.ok, JSONObject(["messageIdentifiers": .array(state.messages.keys.sorted().map {
                    .object(JSONObject(["messageIdentifier": .string($0), "messageState": .string("APPROVED")]))
                })]))
            }
        }
        router.put("/inApps/v1/messaging/default/:product/:locale") { request, context in
            let object = try? StrictJSONParser().parseObject(Array(buffer: try await request.body.collect(upTo: 1 << 16)))
            let key = (context.parameters.get("product") ?? "") + "/" + (context.parameters.get("locale") ?? "")
            return self.retentionAnswer(request) { state in
                guard let id = object?["messageIdentifier"]?.stringValue, state.messages[id] != nil else {
                    return Self.appleError(.notFound, 4_040_015, "Message not found.")
                }
                state.defaults[key] = id
                return Response(status: .ok)
            }
        }
        router.delete("/inApps/v1/messaging/default/:product/:locale") { request, context in
            let key = (context.parameters.get("product") ?? "") + "/" + (context.parameters.get("locale") ?? "")
            return self.retentionAnswer(request) { state in
                guard state.defaults.removeValue(forKey: key) != nil else { return Self.appleError(.notFound, 4_040_015, "Default message not found.") }
                return Response(status: .ok)
            }
        }
        router.put("/inApps/v1/messaging/realtime/url") { request, _ in
            let object = try? StrictJSONParser().parseObject(Array(buffer: try await request.body.collect(upTo: 1 << 16)))
            return self.retentionAnswer(request) { state in
                guard let url = object?["realtimeURL"]?.stringValue, url.hasPrefix("https://"), url.count <= 256 else {
                    return Self.appleError(.badRequest, 4_000_000, "Invalid request.")
                }
                state.realtimeURL = url
                return Response(status: .ok)
            }
        }
        router.get("/inApps/v1/messaging/realtime/url") { request, _ in
            self.retentionAnswer(request) { state in
                guard let url = state.realtimeURL else { return Self.appleError(.notFound, 4_040_000, "Not found.") }
                return Self.json(.ok, JSONObject(["realtimeURL": .string(url)]))
            }
        }
        router.delete("/inApps/v1/messaging/realtime/url") { request, _ in
            self.retentionAnswer(request) { state in
                state.realtimeURL = nil
                return Response(status: .ok)
            }
        }
    }

    func retentionAnswer(_ request: Request, _ make: (inout RetentionMessaging) -> Response) -> Response {
        if let refused = unauthorized(request) { return refused }
        let answer: Response = retention.withLock { make(&$0) }
        log(request, status: Int(answer.status.code))
        return answer
    }

    static func isLowercaseUUID(_ text: String) -> Bool { UUID(uuidString: text) != nil && text == text.lowercased() }

    func uploadImage(_ request: Request, id: String) async throws -> Response {
        let body = try await request.body.collect(upTo: 8 << 20)
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        return retentionAnswer(request) { state in
            guard Self.isLowercaseUUID(id) else { return Self.appleError(.badRequest, 4_000_000, "Invalid image identifier.") }
            guard request.headers[.contentType] == "image/png", Array(buffer: body).starts(with: png) else {
                return Self.appleError(.badRequest, 4_000_000, "Invalid image.")
            }
            guard state.images[id] == nil else { return Self.appleError(.conflict, 4_090_000, "Image already exists.") }
            state.images[id] = body.readableBytes
            return Response(status: .ok)
        }
    }

    func uploadMessage(_ request: Request, id: String) async throws -> Response {
        let object = try? StrictJSONParser().parseObject(Array(buffer: try await request.body.collect(upTo: 1 << 16)))
        return retentionAnswer(request) { state in
            guard Self.isLowercaseUUID(id) else { return Self.appleError(.badRequest, 4_000_000, "Invalid message identifier.") }
            guard let object, let header = object["header"]?.stringValue, let body = object["body"]?.stringValue, header.count <= 66, body.count <= 144 else {
                return Self.appleError(.badRequest, 4_000_000, "Invalid request: a header of at most 66 characters and a body of at most 144.")
            }
            if let image = object["image"]?.objectValue {
                guard let imageId = image["imageIdentifier"]?.stringValue, state.images[imageId] != nil else {
                    return Self.appleError(.notFound, 4_040_014, "Image not found.")
                }
            }
            guard state.messages[id] == nil else { return Self.appleError(.conflict, 4_090_001, "Message already exists.") }
            state.messages[id] = object
            return Response(status: .ok)
        }
    }
}
