import Foundation
import PipelineTestSupport
import TestGates
import Testing

/// `pipelinectl retention-messages` against the fake App Store Server API's Retention Messaging API (docs/offers.md):
/// upload, list and delete images and messages, the default message, the real-time URL; Apple's refusals reported.
@Suite("pipelinectl retention-messages: Apple's Retention Messaging API through the fake", .serialized, .requiresKafkaAndPostgres)
struct RetentionMessagesProcessTests: ProcessSuite {
    static let app = ["--bundle-id", FakeAppleFixture.bundleId, "--environment", "Production"]

    @Test("images, messages, the default message and the real-time URL: uploaded, listed, deleted; a too-long header and an unknown image refused with Apple's answer")
    func catalogue() async throws {
        let scene = try await BackfillScene(bootstrap: bootstrap, postgresURL: postgresURL, withWorker: false)
        let fast = ["APPSTORE_API_RATE": "retention-messaging=100"]
        func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
            try await scene.run(["retention-messages"] + arguments + Self.app, extra: fast)
        }
        let image = "0f8e6a2c-1b3d-4e5f-9a8b-7c6d5e4f3a2b"
        let message = "a1b2c3d4-0000-4000-8000-00000000000a"
        let png = scene.fixture.directory + "/banner.png"
        try Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 100)).write(to: URL(fileURLWithPath: png))

        let uploaded = try await run(["upload-image", "--id", image.uppercased(), "--file", png])
        #expect(uploaded.status == 0, "\(uploaded.output)")
        #expect(scene.apple.fake.retentionMessaging.images[image] == 108, "identifiers go lower case, the PNG's bytes arrive")
        let unknownImage = try await run(["upload-message", "--id", message, "--header", "Stay", "--body", "Half price", "--image-id", UUID().uuidString, "--alt-text", "x"])
        #expect(unknownImage.status != 0 && unknownImage.output.contains("4040014"), "\(unknownImage.output)")
        let tooLong = try await run(["upload-message", "--id", message, "--header", String(repeating: "h", count: 67), "--body", "b"])
        #expect(tooLong.status != 0 && tooLong.output.contains("400"), "\(tooLong.output)")
        let good = try await run(["upload-message", "--id", message, "--header", "Before you go", "--body", "Three months at half price", "--image-id", image, "--alt-text", "A banner"])
        #expect(good.status == 0, "\(good.output)")
        let stored = try #require(scene.apple.fake.retentionMessaging.messages[message])
        #expect(stored["header"] == .string("Before you go") && stored["image"]?.objectValue?["altText"] == .string("A banner"))
        let listed = try await run(["messages", "--json"])
        #expect(listed.status == 0 && listed.output.contains("\"messageIdentifier\":\"\(message)\"") && listed.output.contains("APPROVED"), "\(listed.output)")
        let images = try await run(["images"])
        #expect(images.output.contains(image))

        #expect(try await run(["default", "set", "--product-id", "com.example.pipeline.pro.monthly", "--locale", "en-US", "--message-id", message]).status == 0)
        #expect(scene.apple.fake.retentionMessaging.defaults["com.example.pipeline.pro.monthly/en-US"] == message)
        #expect(try await run(["realtime-url", "set", "https://api.example.com/v1/apps/\(FakeAppleFixture.bundleId)/retention"]).status == 0)
        let shown = try await run(["realtime-url", "show"])
        #expect(shown.output.contains("https://api.example.com/v1/apps/\(FakeAppleFixture.bundleId)/retention"), "\(shown.output)")
        #expect(try await run(["realtime-url", "set", "http://plain.example.com"]).status != 0, "https only")

        #expect(try await run(["default", "delete", "--product-id", "com.example.pipeline.pro.monthly", "--locale", "en-US"]).status == 0)
        #expect(try await run(["delete-message", "--id", message]).status == 0)
        #expect(try await run(["delete-image", "--id", image]).status == 0)
        #expect(try await run(["realtime-url", "delete"]).status == 0)
        let state = scene.apple.fake.retentionMessaging
        #expect(state.images.isEmpty && state.messages.isEmpty && state.defaults.isEmpty && state.realtimeURL == nil)
        #expect(try await run(["realtime-url", "show"]).output.contains("(none)"))
        await scene.finish()
    }
}
