import Logging
import PostgresNIO

/// One consumer's queries over the pipeline's one database: erasure's (`ErasureStore`), the customer API's
/// (`CustomerStore`), metrics' (`MetricsStore`). The client and logger they run on are defined once, here;
/// `Consumer` only tells the kinds apart, and each consumer's queries are an extension of its own
/// `DatabaseQueries<Marker>`, in its own module beside the code that uses them (the schema stays `Migrations`').
public struct DatabaseQueries<Consumer>: Sendable {
    public let client: PostgresClient
    public let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }
}
