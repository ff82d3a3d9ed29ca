import AppStoreBudget
import AppStoreNotifications
import AppStoreServerAPI
import Logging
import PostgresNIO
import ServiceLifecycle

extension PipelineSettings {
    /// An App Store Server API client per environment of `APPS` (Production, Sandbox) when the `APPSTORE_*` key is
    /// configured, else none. Every call takes its turn in the budget every process shares (in `postgres`), in
    /// `lane` unless the caller says otherwise; it waits at most `maximumWait`, then fails `.throttled`.
    public func appStoreClients(
        maximumWait: Duration, postgres: PostgresClient, lane: AppStoreAPILane, logger: Logger
    ) throws -> [Environment: AppStoreServerAPIClient] {
        var clients: [Environment: AppStoreServerAPIClient] = [:]
        guard let variables = appStoreVariables else { return clients }
        let budget = SharedRequestBudget(client: postgres, logger: logger)
        for environment in Set(apps.flatMap(\.environments)) where environment == .production || environment == .sandbox {
            var configuration = try AppStoreServerAPIConfiguration.fromEnvironment(variables, environment: environment)
            configuration.rateLimits.maximumWait = maximumWait
            clients[environment] = AppStoreServerAPIClient(configuration: configuration, logger: logger, budget: budget, defaultLane: lane)
        }
        return clients
    }
}

/// Closes the App Store Server API clients when the process stops.
public struct AppStoreClients: Service {
    let clients: [AppStoreServerAPIClient]

    public init(clients: [AppStoreServerAPIClient]) {
        self.clients = clients
    }

    public func run() async throws {
        try? await gracefulShutdown()
        for client in clients { await client.shutdown() }
    }
}
