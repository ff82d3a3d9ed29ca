import EntitlementStore

/// The customer API's queries (and `pipelinectl api-keys`'): customers' subscriptions and one-time purchases,
/// transactions and orders, purchase claims and their owners, API keys. The worker's side of a claim (deciding the
/// owner in the batch transaction) stays with `EntitlementStore`; the tables are the one schema of `Migrations`.
public typealias CustomerStore = DatabaseQueries<CustomerQueries>

/// Marks the customer API's queries (`CustomerStore`).
public enum CustomerQueries {}

extension EntitlementStore {
    /// The customer API's queries over this store's connections (`pipelinectl api-keys` opens one store for a command).
    public var customers: CustomerStore { CustomerStore(client: client, logger: logger) }
}
