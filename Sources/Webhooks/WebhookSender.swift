import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import PipelineConfiguration
import ServiceRuntime
import Tracing

/// What one delivery attempt came to.
package struct WebhookAttempt: Sendable, Hashable {
    /// The HTTP status, nil when no answer came (refused target, connection error, timeout).
    package var status: Int?
    /// Why it failed without a status (escaped, bounded), or nil.
    package var error: String?
    package var latencyMilliseconds: Int
    /// At most `WebhookSender.excerptBytes` of the answer's body, as text.
    package var responseExcerpt: String?
    /// A 429's or 503's `Retry-After` (seconds or an HTTP date), as a delay from the answer.
    package var retryAfter: Duration?
    /// True when the attempt's deadline ended it (no answer, or an answer whose body did not end in time).
    package var timedOut = false
    /// The trace the attempt was made in (W3C trace id), when tracing is on.
    package var traceId: String?
    /// 2xx within the timeout.
    package var succeeded: Bool { status.map { (200..<300).contains($0) } ?? false }

    package init(status: Int?, error: String?, latencyMilliseconds: Int, responseExcerpt: String?, retryAfter: Duration? = nil, timedOut: Bool = false) {
        self.status = status
        self.error = error
        self.latencyMilliseconds = latencyMilliseconds
        self.responseExcerpt = responseExcerpt
        self.retryAfter = retryAfter
        self.timedOut = timedOut
    }
}

/// POSTs one signed delivery as the Standard Webhooks spec says, with the limits a sender owes the operator:
/// - one deadline (`WEBHOOK_TIMEOUT`) for the whole attempt: name resolution, connect, TLS, the request, the
///   answer's head and its body. A receiver that answers a head and then stalls, or trickles a byte a second, is
///   cut there (the connection closed) and the attempt is a timeout, so an attempt never outlives its lease;
/// - the host resolved once, every address checked (`WebhookTarget`), and the connection made to the checked
///   address (AsyncHTTPClient's DNS override: the `Host` header and TLS server name stay the URL's), so a second
///   resolution cannot point the request elsewhere (DNS rebinding);
/// - no redirect followed, at most 64 KB of the answer read.
///
/// Each attempt has a client of its own, since the address it may connect to is the attempt's own; the client is
/// shut down when the attempt ends, closing whatever the deadline cut.
package final class WebhookSender: Sendable {
    package static let excerptBytes = 65_536
    /// The headers every delivery carries (docs/webhooks.yaml lists each; the consistency test checks it).
    package static let headerNames = ["webhook-id", "webhook-timestamp", "webhook-signature", "content-type"]
    let timeout: Duration
    let allowPrivateTargets: Bool

    package init(timeout: Duration, allowPrivateTargets: Bool) {
        self.timeout = timeout
        self.allowPrivateTargets = allowPrivateTargets
    }

    /// Sends `body` (the event as structured CloudEvents JSON) to `url` signed with `secrets` (the current one,
    /// plus the previous one during a rotation's overlap).
    /// With tracing on, the HTTP client adds the request's `traceparent` (a client span of the current context), so
    /// the receiver can continue the notification's trace.
    package func deliver(url: String, allowHTTP: Bool, id: String, body: [UInt8], secrets: [String], now: Date = Date()) async -> WebhookAttempt {
        let started = ContinuousClock.now
        let deadline = started + timeout
        func elapsed() -> Int { Self.milliseconds(ContinuousClock.now - started) }
        let target: WebhookTarget
        let address: WebhookTarget.ResolvedAddress
        do {
            target = try WebhookTarget.parse(url, allowHTTP: allowHTTP)
            address = try await target.checkAddresses(allowPrivate: allowPrivateTargets, deadline: deadline)[0]
        } catch {
            return WebhookAttempt(status: nil, error: error.description, latencyMilliseconds: elapsed(), responseExcerpt: nil, timedOut: ContinuousClock.now >= deadline)
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

        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(connect: .nanoseconds(Int64(Self.milliseconds(timeout)) * 1_000_000))
        configuration.connectionPool = .init(idleTimeout: .seconds(1), concurrentHTTP1ConnectionsPerHostSoftLimit: 1)
        if WebhookTarget.literal(target.host) == nil { configuration.dnsOverride = [target.host: address.text] }
        // AsyncHTTPClient's client span would record `url.full` (an endpoint's `?token=` among it): off. The POST is
        // our client span instead, with the host and port only, and its `traceparent` goes to the receiver.
        configuration.tracing.tracer = nil
        let span: (any Span)? = PipelineTracing.isTracing ? startSpan("POST", ofKind: .client) : nil
        if let span {
            span.attributes["http.request.method"] = "POST"
            span.attributes["server.address"] = target.host
            if let port = target.url.port { span.attributes["server.port"] = port }
            InstrumentationSystem.instrument.inject(span.context, into: &request.headers, using: HTTPHeadersInjector())
        }
        defer { span?.end() }
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let prepared = request
        let outcome = await withTaskGroup(of: WebhookAttempt?.self) { group in
            group.addTask { await Self.exchange(client, prepared, deadline: deadline, started: started, timeout: self.timeout) }
            group.addTask {
                try? await Task.sleep(until: deadline)
                return nil
            }
            let first = await group.next() ?? nil
            // The deadline came first: cancelling the exchange ends its body stream, which closes the connection.
            group.cancelAll()
            return first
        }
        try? await client.shutdown()
        if let span, let status = outcome?.status {
            span.attributes["http.response.status_code"] = status
            if status >= 400 { span.setStatus(.init(code: .error)) }
        }
        return outcome
            ?? WebhookAttempt(
                status: nil, error: Self.timeoutReason(timeout), latencyMilliseconds: elapsed(), responseExcerpt: nil, timedOut: true)
    }

    /// The request, its answer's head and at most `excerptBytes` of its body; cancelled at the deadline.
    static func exchange(
        _ client: HTTPClient, _ request: HTTPClientRequest, deadline: ContinuousClock.Instant, started: ContinuousClock.Instant, timeout: Duration
    ) async -> WebhookAttempt {
        func elapsed() -> Int { milliseconds(ContinuousClock.now - started) }
        let remaining = deadline - ContinuousClock.now
        do {
            let response = try await client.execute(request, timeout: .nanoseconds(Int64(max(1, milliseconds(remaining))) * 1_000_000))
            var excerpt: [UInt8] = []
            for try await chunk in response.body {
                excerpt += chunk.readableBytesView.prefix(excerptBytes - excerpt.count)
                if excerpt.count >= excerptBytes { break }  // the rest is never read
            }
            let status = Int(response.status.code)
            return WebhookAttempt(
                status: status, error: nil, latencyMilliseconds: elapsed(), responseExcerpt: String(decoding: excerpt, as: UTF8.self),
                retryAfter: status == 429 || status == 503 ? response.headers.first(name: "retry-after").flatMap { retryAfter($0) } : nil)
        } catch {
            let timedOut = ContinuousClock.now >= deadline || (error as? HTTPClientError).map { $0 == .deadlineExceeded || $0 == .readTimeout } == true
            let reason = timedOut ? timeoutReason(timeout) : String(describing: error)
            return WebhookAttempt(status: nil, error: String(reason.prefix(300)), latencyMilliseconds: elapsed(), responseExcerpt: nil, timedOut: timedOut)
        }
    }

    static func timeoutReason(_ timeout: Duration) -> String {
        "no answer within \(timeout) (WEBHOOK_TIMEOUT bounds the whole attempt, the answer's body included)"
    }

    /// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3); nil when it is neither.
    package static func retryAfter(_ value: String, now: Date = Date()) -> Duration? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(text), seconds >= 0 { return .seconds(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = formatter.date(from: text) else { return nil }
        return .milliseconds(max(0, Int64(date.timeIntervalSince(now) * 1000)))
    }

    static func milliseconds(_ duration: Duration) -> Int {
        Int(duration.wholeMilliseconds)
    }
}

/// Writes a context's `traceparent` into the webhook request's headers.
struct HTTPHeadersInjector: Injector {
    func inject(_ value: String, forKey key: String, into headers: inout HTTPHeaders) { headers.replaceOrAdd(name: key, value: value) }
}
