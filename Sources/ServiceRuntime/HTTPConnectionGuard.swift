import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1

/// Deadlines and early refusals for ingest's public HTTP/1.1 connections, below the router.
///
/// Ingest faces the internet unauthenticated. Hummingbird's defaults hold a connection for as long as a client
/// trickles bytes, read a whole oversize body after refusing it, and answer framing errors with an empty 400.
/// This guard sits between NIO's HTTP/1 codec and Hummingbird's and enforces, per connection:
/// - **idle timeout**: between requests, a connection that sends nothing for `idleTimeout` is closed;
/// - **request deadline**: from a request's first byte, its head and body must arrive within `requestTimeout`,
///   or the client gets `408 requestTimeout` and the connection is closed (slow heads, trickled bodies, a
///   `Content-Length` never honoured);
/// - **refusals before the body**: an announced `Content-Length` above the limit, `Expect` other than
///   `100-continue`, a missing or repeated `Host`, `CONNECT`, and framing errors are answered at once with the
///   JSON refusal shape and the connection closed; `Expect: 100-continue` within the limit gets its `100`;
/// - **closing after a refusal**: a response with `Connection: close`, an HTTP/1.0 request without keep-alive,
///   or a response written before the request was read to its end closes the connection once written.
/// Every refusal and timeout is counted through `count` (ingest's `ingest_requests_total`).
/// The deadlines and body limit of a guarded HTTP/1.1 server (ingest's, the customer API's), and the body of the
/// guard's own refusals.
public struct HTTPConnectionLimits: Sendable {
    var idleTimeout: TimeAmount
    var requestTimeout: TimeAmount
    var maximumBodyBytes: Int
    /// The body of the guard's own refusals: ingest's `{"error": code, "reason": text}` unless told otherwise.
    var refusalBody: @Sendable (_ code: String, _ reason: String) -> String
    /// The status and code of an announced body over the limit: ingest's 400 `bodyTooLarge` (Apple reads any 4xx
    /// alike), or e.g. the customer API's 413 `body_too_large`.
    var bodyTooLarge: (status: Int, code: String)?

    public init(
        idleTimeout: Duration, requestTimeout: Duration, maximumBodyBytes: Int,
        refusalBody: @escaping @Sendable (_ code: String, _ reason: String) -> String = { RefusalBody.json(code: $0, reason: $1) },
        bodyTooLarge: (status: Int, code: String)? = nil
    ) {
        self.bodyTooLarge = bodyTooLarge
        self.idleTimeout = TimeAmount(idleTimeout)
        self.requestTimeout = TimeAmount(requestTimeout)
        self.maximumBodyBytes = maximumBodyBytes
        self.refusalBody = refusalBody
    }
}

final class IngestConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    typealias Limits = HTTPConnectionLimits

    enum Phase {
        /// Between requests: no byte of the next one yet.
        case idle
        /// A request's bytes are arriving (its head may not be decoded yet).
        case receiving
        /// The request was read to its end; the application is answering (bounded by the produce timeout).
        case answering
        /// Refused or timed out: nothing more is read or forwarded; the connection is closing.
        case closing
    }

    private let limits: Limits
    private let count: @Sendable (Int, String) -> Void
    private var phase = Phase.idle
    private var deadline: Scheduled<Void>?
    private var requestVersion = HTTPVersion.http1_1
    private var closeAfterResponse = false
    private var responseStarted = false

    init(limits: Limits, count: @escaping @Sendable (Int, String) -> Void) {
        self.limits = limits
        self.count = count
    }

    // MARK: - Lifecycle and deadlines

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context, limits.idleTimeout) }
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context, limits.idleTimeout)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        phase = .closing
        context.fireChannelInactive()
    }

    private func arm(_ context: ChannelHandlerContext, _ amount: TimeAmount) {
        deadline?.cancel()
        deadline = context.eventLoop.assumeIsolatedUnsafeUnchecked().scheduleTask(in: amount) { [self] in
            deadline = nil
            deadlinePassed(context)
        }
    }

    private func deadlinePassed(_ context: ChannelHandlerContext) {
        switch phase {
        case .idle:
            context.close(promise: nil)  // an idle keep-alive connection: no request, nothing to answer
        case .receiving:
            refuse(context, .requestTimeout, code: "requestTimeout", reason: "the request's head and body did not arrive within \(limits.requestTimeout.nanoseconds / 1_000_000) ms")
        case .answering, .closing:
            break
        }
    }

    /// Called by `IngestByteActivity` (in front of the HTTP decoder) for every read: the first bytes of a request
    /// start its deadline, before a slow head has been decoded.
    func bytesArrived(_ context: ChannelHandlerContext) {
        guard phase == .idle else { return }
        phase = .receiving
        responseStarted = false
        arm(context, limits.requestTimeout)
    }

    // MARK: - Requests

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard phase != .closing else { return }  // refused: the rest of the request is dropped, not read into anything
        let part = unwrapInboundIn(data)
        switch part {
        case .head(var head):
            if phase == .idle { bytesArrived(context) }
            requestVersion = head.version
            closeAfterResponse = !head.isKeepAlive
            if let refusal = Self.refusal(for: head, maximumBodyBytes: limits.maximumBodyBytes, bodyTooLarge: limits.bodyTooLarge) {
                refuse(context, refusal.status, code: refusal.code, reason: refusal.reason)
                return
            }
            if head.headers.contains(name: "expect") {
                // 100-continue within the limit: tell the client to send the body now instead of making it wait.
                head.headers.remove(name: "expect")
                context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .continue))), promise: nil)
            }
            context.fireChannelRead(wrapInboundOut(.head(head)))
        case .body:
            context.fireChannelRead(data)
        case .end:
            if phase == .receiving {
                phase = .answering
                deadline?.cancel()
                deadline = nil
            }
            context.fireChannelRead(data)
        }
    }

    /// What to refuse from the head alone, before any body byte is read.
    static func refusal(
        for head: HTTPRequestHead, maximumBodyBytes: Int, bodyTooLarge: (status: Int, code: String)? = nil
    ) -> (status: HTTPResponseStatus, code: String, reason: String)? {
        if head.method == .CONNECT {
            return (.methodNotAllowed, "methodNotAllowed", "CONNECT is not accepted here; only POST of a notification")
        }
        let hosts = head.headers["host"].count
        if hosts > 1 || (hosts == 0 && Self.isHTTP11OrLater(head.version)) {
            return (.badRequest, "invalidHost", hosts == 0 ? "an HTTP/1.1 request needs a Host header" : "a request has exactly one Host header, this has \(hosts)")
        }
        let lengths = head.headers["content-length"]
        if lengths.count > 1 && Set(lengths).count > 1 {
            return (.badRequest, "invalidContentLength", "conflicting Content-Length headers")
        }
        if let length = lengths.first.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) }), length > maximumBodyBytes {
            // The same refusal the handler gives a body found too large while reading it (the core's
            // `RequestBodyError.bodyTooLarge`, which this module does not import), given before reading.
            let reason = "the body is \(length) bytes, over the \(maximumBodyBytes)-byte limit"
            if let bodyTooLarge { return (HTTPResponseStatus(statusCode: bodyTooLarge.status), bodyTooLarge.code, reason) }
            return (.badRequest, "bodyTooLarge", reason)
        }
        let expectations = head.headers["expect"]
        if !expectations.isEmpty, expectations.contains(where: { $0.lowercased() != "100-continue" }) || !Self.isHTTP11OrLater(head.version) {
            return (.expectationFailed, "expectationFailed", "only Expect: 100-continue is supported")
        }
        return nil
    }

    static func isHTTP11OrLater(_ version: HTTPVersion) -> Bool {
        version.major > 1 || (version.major == 1 && version.minor >= 1)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError {
            // A framing error: the byte stream cannot be trusted any further. Answer in the refusal shape, close.
            refuse(context, .badRequest, code: "malformedRequest", reason: "the request is not valid HTTP/1.1 framing")
            return
        }
        context.fireErrorCaught(error)
    }

    // MARK: - Responses

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard phase != .closing else {
            promise?.fail(ChannelError.ioOnClosedChannel)  // the guard already answered this request
            return
        }
        switch unwrapOutboundIn(data) {
        case .head(var head):
            responseStarted = true
            if head.headers["connection"].contains(where: { $0.lowercased() == "close" }) || phase == .receiving {
                // A refusal written before the body was read: the rest of the body is not worth reading.
                closeAfterResponse = true
            }
            if closeAfterResponse { head.headers.replaceOrAdd(name: "connection", value: "close") }
            context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .body:
            context.write(data, promise: promise)
        case .end:
            if closeAfterResponse {
                phase = .closing
                deadline?.cancel()
                deadline = nil
                context.writeAndFlush(data).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                promise?.succeed(())
            } else {
                phase = .idle
                context.write(data, promise: promise)
                arm(context, limits.idleTimeout)
            }
        }
    }

    /// Answers `status` with `{"error": code, "reason": reason}` unless a response already started, counts it,
    /// and closes the connection.
    private func refuse(_ context: ChannelHandlerContext, _ status: HTTPResponseStatus, code: String, reason: String) {
        let answer = !responseStarted
        phase = .closing
        deadline?.cancel()
        deadline = nil
        count(Int(status.code), code)
        guard answer, context.channel.isActive else {
            context.close(promise: nil)
            return
        }
        let body = limits.refusalBody(code, reason)
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "content-length", value: String(body.utf8.count))
        headers.add(name: "connection", value: "close")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: requestVersion, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

/// In front of the HTTP decoder: tells the guard that a request's bytes are arriving, so a head trickled one
/// byte at a time is bounded by the request deadline rather than waiting to be decoded.
final class IngestByteActivity: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let guardHandler: IngestConnectionGuard
    private var guardContext: ChannelHandlerContext?

    init(guardHandler: IngestConnectionGuard) {
        self.guardHandler = guardHandler
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if guardContext == nil { guardContext = try? context.pipeline.syncOperations.context(handler: guardHandler) }
        if let guardContext { guardHandler.bytesArrived(guardContext) }
        context.fireChannelRead(data)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        guardContext = nil
    }
}

/// Hummingbird's HTTP/1 child channel with the guard in its pipeline.
public struct GuardedHTTP1Channel: ServerChildChannel {
    public typealias Value = HTTP1Channel.Value
    let inner: HTTP1Channel
    let limits: HTTPConnectionLimits
    let count: @Sendable (Int, String) -> Void

    public func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let guardHandler = IngestConnectionGuard(limits: limits, count: count)
            let operations = channel.pipeline.syncOperations
            let codec = try operations.handler(type: HTTP1ToHTTPServerCodec.self)
            try operations.addHandler(guardHandler, position: .before(codec))
            try operations.addHandler(IngestByteActivity(guardHandler: guardHandler), position: .first)
            return value
        }
    }

    public func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }

    /// The server builder for `Application(server:)`.
    public static func builder(limits: HTTPConnectionLimits, count: @escaping @Sendable (Int, String) -> Void) -> HTTPServerBuilder {
        HTTPServerBuilder { responder in
            GuardedHTTP1Channel(inner: HTTP1Channel(responder: responder), limits: limits, count: count)
        }
    }
}
