import AppStoreNotifications
import Crypto
import EntitlementStore
import Foundation
import Logging
import PostgresNIO

/// The operator console's queries (and `pipelinectl operators`'): operators and their sessions, the audit, the
/// search, a subscription's or a customer's rows and their one timeline, dead letters. Reads come back as JSON
/// built by PostgreSQL (`json_build_object`), so a page gets exactly the fields its template shows.
public struct ConsoleStore: Sendable {
    public let client: PostgresClient
    let logger: Logger

    /// The one JSON value the query's single text column holds (`null` when there is no row).
    func json(_ query: PostgresQuery) async throws -> JSONValue {
        let rows = try await client.query(query, logger: logger)
        for try await text in rows.decode(String?.self) {
            guard let text else { return .null }
            return try StrictJSONParser(maximumDepth: 64).parse(Array(text.utf8))
        }
        return .null
    }
}

extension EntitlementStore {
    /// The console's queries over this store's connections (`pipelinectl operators` opens one store for a command).
    public var console: ConsoleStore { ConsoleStore(client: client, logger: logger) }
}

// MARK: - Operators and sessions

/// An operator's role: viewers read, support also acts (re-drive, reconcile, replay), admins as support.
public enum OperatorRole: String, Sendable, CaseIterable {
    case viewer, support, admin

    public var mayAct: Bool { self != .viewer }
}

public struct OperatorAccount: Sendable, Hashable {
    public var id: String
    public var email: String
    public var role: OperatorRole
    public var passwordHash: String
    public var disabled: Bool
    public var lastLoginAt: Date?
    public var createdAt: Date
}

/// A signed-in operator, as a request's session finds them.
public struct OperatorSession: Sendable, Hashable {
    public var operatorId: String
    public var email: String
    public var role: OperatorRole
    public var csrfToken: String
}

extension ConsoleStore {
    /// Adds an operator; false when the email is taken.
    public func addOperator(email: String, role: OperatorRole, passwordHash: String) async throws -> Bool {
        let rows = try await client.query(
            "INSERT INTO operators (email, role, password_hash) VALUES (\(email.lowercased()), \(role.rawValue), \(passwordHash)) ON CONFLICT (email) DO NOTHING RETURNING id",
            logger: logger)
        for try await _ in rows { return true }
        return false
    }

    /// The operator with `email`, with their password hash (for signing in).
    public func operatorAccount(email: String) async throws -> OperatorAccount? {
        try await accounts(email: email.lowercased()).first
    }

    /// Every operator, by email; no password hash is read.
    public func operators() async throws -> [OperatorAccount] {
        try await accounts(email: nil)
    }

    /// The operator with `email` (and their hash), or, for nil, all of them without their hashes.
    private func accounts(email: String?) async throws -> [OperatorAccount] {
        let rows = try await client.query(
            """
            SELECT id::text, email, role, CASE WHEN \(email)::text IS NULL THEN '' ELSE password_hash END, disabled_at IS NOT NULL, last_login_at, created_at
            FROM operators WHERE \(email)::text IS NULL OR email = \(email) ORDER BY email
            """,
            logger: logger)
        var accounts: [OperatorAccount] = []
        for try await (id, email, role, hash, disabled, last, created) in rows.decode((String, String, String, String, Bool, Date?, Date).self) {
            accounts.append(OperatorAccount(
                id: id, email: email, role: OperatorRole(rawValue: role) ?? .viewer, passwordHash: hash, disabled: disabled, lastLoginAt: last, createdAt: created))
        }
        return accounts
    }

    /// Disables (ending every session), re-enables or removes an operator, or sets a new password hash (ending
    /// every session). False when no operator has that email.
    public func updateOperator(email: String, _ change: OperatorChange) async throws -> Bool {
        let email = email.lowercased()
        let query: PostgresQuery = switch change {
        case .disable: "UPDATE operators SET disabled_at = coalesce(disabled_at, now()) WHERE email = \(email) RETURNING id"
        case .enable: "UPDATE operators SET disabled_at = NULL WHERE email = \(email) RETURNING id"
        case .remove: "DELETE FROM operators WHERE email = \(email) RETURNING id"
        case .password(let hash): "UPDATE operators SET password_hash = \(hash) WHERE email = \(email) RETURNING id"
        }
        return try await client.withTransaction(logger: logger) { connection in
            var found = false
            for try await id in try await connection.query(query, logger: logger).decode(UUID.self) {
                found = true
                try await connection.query("DELETE FROM operator_sessions WHERE operator_id = \(id)", logger: logger)
            }
            return found
        }
    }

    public enum OperatorChange: Sendable {
        case disable, enable, remove
        case password(hash: String)
    }

    /// Opens a session: the cookie's token is returned, only its SHA-256 stored.
    public func openSession(operatorId: String) async throws -> (token: String, csrf: String) {
        let token = Self.randomToken()
        let csrf = Self.randomToken()
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query(
                "INSERT INTO operator_sessions (token_sha256, operator_id, csrf_token) VALUES (decode(\(Self.digest(token)), 'hex'), \(operatorId)::uuid, \(csrf))", logger: logger)
            try await connection.query("UPDATE operators SET last_login_at = now() WHERE id = \(operatorId)::uuid", logger: logger)
        }
        return (token, csrf)
    }

    /// The session of `token` when it was used within `idle`, is younger than `maximum` and its operator is enabled; its
    /// last use moves to now. An idle or expired one is deleted.
    /// `maximum`: a session older than this is over however busy it was (`CONSOLE_SESSION_MAX`).
    public func session(token: String, idle: Duration, maximum: Duration = .seconds(12 * 3600)) async throws -> OperatorSession? {
        let seconds = Double(idle.components.seconds) + Double(idle.components.attoseconds) / 1e18
        let lifetime = Double(maximum.components.seconds) + Double(maximum.components.attoseconds) / 1e18
        let rows = try await client.query(
            """
            WITH touched AS (
                UPDATE operator_sessions s SET last_seen_at = now()
                FROM operators o
                WHERE s.token_sha256 = decode(\(Self.digest(token)), 'hex') AND o.id = s.operator_id AND o.disabled_at IS NULL
                    AND s.last_seen_at > now() - make_interval(secs => \(seconds)) AND s.created_at > now() - make_interval(secs => \(lifetime))
                RETURNING o.id::text, o.email, o.role, s.csrf_token
            )
            SELECT * FROM touched
            """,
            logger: logger)
        for try await (id, email, role, csrf) in rows.decode((String, String, String, String).self) {
            return OperatorSession(operatorId: id, email: email, role: OperatorRole(rawValue: role) ?? .viewer, csrfToken: csrf)
        }
        try await client.query("DELETE FROM operator_sessions WHERE token_sha256 = decode(\(Self.digest(token)), 'hex')", logger: logger)
        return nil
    }

    public func closeSession(token: String) async throws {
        try await client.query("DELETE FROM operator_sessions WHERE token_sha256 = decode(\(Self.digest(token)), 'hex')", logger: logger)
    }

    /// 32 random bytes, base64url.
    public static func randomToken() -> String {
        let key = SymmetricKey(size: .bits256)
        return key.withUnsafeBytes { Data($0) }.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The SHA-256 of a session token, hex (bound as `decode(…, 'hex')`).
    static func digest(_ token: String) -> String { SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined() }
}

// MARK: - Audit

extension ConsoleStore {
    /// One operator action with its reason, recorded before (or as) it takes effect; the subscription's or
    /// customer's timeline shows it.
    public func audit(
        operatorEmail: String, action: String, reason: String, bundleId: String? = nil, originalTransactionId: String? = nil, customerId: String? = nil,
        detail: JSONObject = JSONObject()
    ) async throws {
        try await client.query(
            """
            INSERT INTO console_audit (operator_email, action, reason, bundle_id, original_transaction_id, customer_id, detail)
            VALUES (\(operatorEmail), \(action), \(reason), \(bundleId), \(originalTransactionId), \(customerId), \(JSONValue.object(detail).serialized)::jsonb)
            """,
            logger: logger)
    }

    /// The newest audit entries, before `cursor` (an id) when given.
    public func auditLog(before cursor: Int64?, limit: Int) async throws -> JSONValue {
        try await json(
            """
            SELECT json_agg(a ORDER BY a.id DESC)::text FROM (
                SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at, operator_email, action, reason, bundle_id,
                    original_transaction_id, customer_id, detail::text AS detail
                FROM console_audit WHERE \(cursor ?? Int64.max) > id ORDER BY id DESC LIMIT \(limit)
            ) a
            """)
    }
}
