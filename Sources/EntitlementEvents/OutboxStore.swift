import Logging
import PostgresNIO

/// The events relay's queries: one relay round under the election lock, the oldest unpublished age, pruning.
/// The worker writes the outbox rows in its batch transaction (`EntitlementStore`).
public struct OutboxStore: Sendable {
    public let client: PostgresClient
    let logger: Logger
    /// Bounds every statement of a relay round (`EntitlementStore.statementTimeout`'s rule).
    public let statementTimeout: Duration?
    /// The advisory lock that elects the one relay publishing at a time ("evts" in ASCII).
    static let relayLockKey: Int64 = 0x6576_7473

    public init(client: PostgresClient, logger: Logger, statementTimeout: Duration? = nil) {
        self.client = client
        self.logger = logger
        self.statementTimeout = statementTimeout
    }
}
