import Console
import Foundation
import Logging
import PostgresNIO
import StoreTestSupport
import TestSupport
import Testing
import TestGates

/// Console sessions (issue 51: they had no absolute lifetime): a session ends `CONSOLE_SESSION_MAX` after sign-in
/// however busy it was, and after `CONSOLE_SESSION_IDLE` unused.
@Suite("Console sessions: idle and absolute lifetimes", .serialized, .requiresPostgres)
struct ConsoleSessionTests {
    static let logger = quietLogger("console-session-tests")

    @Test("a busy session older than the maximum is over (and deleted); a young one lives; an idle one is over", .migratedDatabase)
    func lifetimes() async throws {
        let database = try MigratedDatabase.required
        let (console, client) = (database.store.console, database.client)
        #expect(try await console.addOperator(email: "op@example.com", role: .admin, passwordHash: "x"))
        let account = try #require(try await console.operatorAccount(email: "op@example.com"))
        let (old, _) = try await console.openSession(operatorId: account.id)
        let (young, _) = try await console.openSession(operatorId: account.id)
        let (idle, _) = try await console.openSession(operatorId: account.id)
        // `old` signed in 13 hours ago and was used a minute ago; `idle` signed in an hour ago, unused for 45 minutes.
        try await client.query(
            "UPDATE operator_sessions SET created_at = now() - interval '13 hours', last_seen_at = now() - interval '1 minute' WHERE token_sha256 = sha256(convert_to(\(old), 'UTF8'))",
            logger: Self.logger)
        #expect(try await console.session(token: young, idle: .seconds(1800), maximum: .seconds(12 * 3600)) != nil)
        #expect(try await console.session(token: old, idle: .seconds(1800), maximum: .seconds(12 * 3600)) == nil, "past CONSOLE_SESSION_MAX")
        #expect(try await console.session(token: old, idle: .seconds(1800), maximum: .seconds(48 * 3600)) == nil, "an ended session is deleted")
        try await client.query(
            "UPDATE operator_sessions SET created_at = now() - interval '1 hour', last_seen_at = now() - interval '45 minutes' WHERE token_sha256 = sha256(convert_to(\(idle), 'UTF8'))",
            logger: Self.logger)
        #expect(try await console.session(token: idle, idle: .seconds(1800), maximum: .seconds(12 * 3600)) == nil, "past CONSOLE_SESSION_IDLE")
    }
}
