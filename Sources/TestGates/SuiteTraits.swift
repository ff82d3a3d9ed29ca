// The suite gates of the test tiers, apart from TestSupport: TestSupport is also linked by the demo's executables
// (the fake App Store Server API, the notification minter), which must not link the testing library.
import TestSupport
import Testing

/// The one gate of suites that need a real service: enabled where the service's URL is set (scripts/services.sh
/// up), and in CI always, so a missing service fails the suite there instead of skipping it.
extension Trait where Self == ConditionTrait {
    /// A Kafka-protocol broker (`KAFKA_BOOTSTRAP_SERVERS`).
    package static var requiresKafka: Self { .enabled(if: TestServices.runKafkaSuites, Comment(rawValue: TestServices.missingKafka)) }
    /// A PostgreSQL server (`POSTGRES_URL`).
    package static var requiresPostgres: Self { .enabled(if: TestServices.runPostgresSuites, Comment(rawValue: TestServices.missingPostgres)) }
    /// Both.
    package static var requiresKafkaAndPostgres: Self {
        .enabled(if: TestServices.runKafkaSuites && TestServices.runPostgresSuites, Comment(rawValue: TestServices.missingKafka + "; " + TestServices.missingPostgres))
    }
}

/// The services a suite gated by one of the traits above runs against: reading one fails the test (in CI, where the
/// gate is always open) with the variable to set.
package enum RequiredServices {
    package static var bootstrap: String {
        get throws { try #require(TestServices.kafkaBootstrapServers, Comment(rawValue: TestServices.missingKafka)) }
    }
    package static var postgresURL: String {
        get throws { try #require(TestServices.postgresURL, Comment(rawValue: TestServices.missingPostgres)) }
    }
}

/// A process suite (Kafka and PostgreSQL): `bootstrap` and `postgresURL` without stored copies of its own.
package protocol ProcessSuite {}

extension ProcessSuite {
    package var bootstrap: String { get throws { try RequiredServices.bootstrap } }
    package var postgresURL: String { get throws { try RequiredServices.postgresURL } }
}

/// A trait that gives each test it reaches a resource of its own (`.freshTopic`, `.migratedDatabase`): applied to a
/// suite it reaches each of the suite's tests, and it never scopes the suite itself.
package protocol PerTestResourceTrait: TestTrait, SuiteTrait, TestScoping {}

extension PerTestResourceTrait {
    package var isRecursive: Bool { true }

    package func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite ? nil : self
    }
}
