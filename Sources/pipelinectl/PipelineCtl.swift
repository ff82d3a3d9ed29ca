import ArgumentParser

/// The operator's tool. Each subcommand reads its inputs, calls the library, and prints.
@main
struct PipelineCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipelinectl",
        abstract: "Operate the App Store Server Notifications V2 pipeline.",
        discussion: """
            Connection settings come from the services' own environment variables (KAFKA_BOOTSTRAP_SERVERS,
            KAFKA_CONFIG_*, POSTGRES_URL, NOTIFICATIONS_TOPIC, DEAD_LETTER_TOPIC, WORKER_GROUP_ID) and, for the App Store Server API, APPSTORE_KEY_ID,
            APPSTORE_ISSUER_ID, APPSTORE_PRIVATE_KEY_FILE, APPSTORE_API_BASE_URL; options override them.
            """,
        subcommands: [
            VerifyCommand.self, MigrateCommand.self, EntitlementsCommand.self, TopicsCommand.self, LagCommand.self, ReplayCommand.self,
            DeadLetterCommand.self, BackfillCommand.self, TestNotificationCommand.self, ReconcileCommand.self, ImportCommand.self,
            ConsumptionCommand.self, EventsCommand.self, APIKeysCommand.self, WebhooksCommand.self, ArchiveCommand.self, MetricsCommand.self,
            ProductsCommand.self, ExchangeRatesCommand.self, OperatorsCommand.self, CustomersCommand.self, RetentionCommand.self,
            RefundsCommand.self, ExtendCommand.self, AppTransactionCommand.self, SettingsCommand.self, AppStoreCommand.self, OffersCommand.self, RetentionMessagesCommand.self,
        ]
    )
}
