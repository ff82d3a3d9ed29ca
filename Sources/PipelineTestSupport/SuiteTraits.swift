import Testing
import TestSupport

/// The one gate of suites that need a real service: enabled where the service's URL is set (scripts/services.sh
/// up), and in CI always, so a missing service fails the suite there instead of skipping it.
extension Trait where Self == ConditionTrait {
    /// A Kafka-protocol broker (`KAFKA_BOOTSTRAP_SERVERS`).
    public static var requiresKafka: Self { .enabled(if: TestServices.runKafkaSuites, Comment(rawValue: TestServices.missingKafka)) }
    /// A PostgreSQL server (`POSTGRES_URL`).
    public static var requiresPostgres: Self { .enabled(if: TestServices.runPostgresSuites, Comment(rawValue: TestServices.missingPostgres)) }
    /// Both.
    public static var requiresKafkaAndPostgres: Self {
        .enabled(if: TestServices.runKafkaSuites && TestServices.runPostgresSuites, Comment(rawValue: TestServices.missingKafka + "; " + TestServices.missingPostgres))
    }
}

/// The services a process suite runs against, read once (a suite gated by `.requiresKafkaAndPostgres` fails here, in
/// CI, with the variable to set).
public struct RequiredServices: Sendable {
    public let bootstrap: String
    public let postgresURL: String

    public init() throws {
        bootstrap = try #require(TestServices.kafkaBootstrapServers, Comment(rawValue: TestServices.missingKafka))
        postgresURL = try #require(TestServices.postgresURL, Comment(rawValue: TestServices.missingPostgres))
    }
}

extension RequiredServices {
    /// (bootstrap, postgresURL), for a suite's two stored properties.
    public var pair: (String, String) { (bootstrap, postgresURL) }
}
