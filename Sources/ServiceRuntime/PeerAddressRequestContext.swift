import Hummingbird
import NIOCore

/// Hummingbird's basic request context with the connection's peer address: what per-client limits count by (the
/// console's sign-in limiter, the customer API's attempts before authentication).
public struct PeerAddressRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
