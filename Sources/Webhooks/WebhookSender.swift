import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// What one delivery attempt came to.
public struct WebhookAttempt: Sendable, Hashable {
    /// The HTTP status, nil when no answer came (refused target, connection error, timeout).
    public var status: Int?
    /// Why it failed without a status (escaped, bounded), or nil.
    public var error: String?
    public var latencyMilliseconds: Int
    /// At most `WebhookSender.excerptBytes` of the answer's body, as text.
    public var responseExcerpt: String?
    /// 2xx within the timeout.
    public var succeeded: Bool { status.map { (200..<300).contains($0) } ?? false }
}

/// POSTs one signed delivery as the Standard Webhooks spec says, with the limits a sender owes the operator: a
/// deadline (`WEBHOOK_TIMEOUT_MS`), no redirect followed, at most 64 KB of the answer read, and the target's
/// addresses checked after DNS resolution immediately before every attempt.
public final class WebhookSender: Sendable {
    public static let excerptBytes = 65_536
    /// The headers every delivery carries (docs/webhooks.yaml lists each; the consistency test checks it).
    public static let headerNames = ["webhook-id", "webhook-timestamp", "webhook-signature", "content-type"]
    let client: HTTPClient
    let timeout: Duration
    let allowPrivateTargets: Bool

    public init(timeout: Duration, allowPrivateTargets: Bool) {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(connect: .seconds(5))
        configuration.connectionPool = .init(idleTimeout: .seconds(30))
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.timeout = timeout
        self.allowPrivateTargets = allowPrivateTargets
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    /// Sends `body` (the event as structured CloudEvents JSON) to `url` signed with `secrets` (the current one,
    /// plus the previous one during a rotation's overlap).
    public func deliver(url: String, allowHTTP: Bool, id: String, body: [UInt8], secrets: [String], now: Date = Date()) async -> WebhookAttempt {
        let started = ContinuousClock.now
        func elapsed() -> Int { Int((ContinuousClock.now - started).components.seconds * 1000 + (ContinuousClock.now - started).components.attoseconds / 1_000_000_000_000_000) }
        let target: WebhookTarget
        do {
            target = try WebhookTarget.parse(url, allowHTTP: allowHTTP)
            _ = try await target.checkAddresses(allowPrivate: allowPrivateTargets)
        } catch {
            return WebhookAttempt(status: nil, error: error.description, latencyMilliseconds: elapsed(), responseExcerpt: nil)
        }
        let timestamp = Int64(now.timeIntervalSince1970)
        var request = HTTPClientRequest(url: target.url.absoluteString)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "appstore-notification-pipeline-webhooks/1")
        request.headers.add(name: "webhook-id", value: id)
        request.headers.add(name: "webhook-timestamp", value: String(timestamp))
        request.headers.add(name: "webhook-signature", value: WebhookSignature.header(id: id, timestamp: timestamp, body: body, secrets: secrets))
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(request, timeout: .nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000))
            var excerpt: [UInt8] = []
            for try await chunk in response.body {
                excerpt += chunk.readableBytesView.prefix(Self.excerptBytes - excerpt.count)
                if excerpt.count >= Self.excerptBytes { break }  // the rest is never read
            }
            return WebhookAttempt(
                status: Int(response.status.code), error: nil, latencyMilliseconds: elapsed(),
                responseExcerpt: String(decoding: excerpt, as: UTF8.self))
        } catch {
            let reason: String
            if let error = error as? HTTPClientError, error == .deadlineExceeded || error == .readTimeout {
                reason = "no answer within \(timeout)"
            } else {
                reason = String(describing: error)
            }
            return WebhookAttempt(status: nil, error: String(reason.prefix(300)), latencyMilliseconds: elapsed(), responseExcerpt: nil)
        }
    }
}
