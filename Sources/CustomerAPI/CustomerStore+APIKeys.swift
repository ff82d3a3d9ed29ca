import Foundation
import Logging
import PostgresNIO

/// A customer API key as stored: never the key itself, only its SHA-256.
public struct APIKeyRecord: Sendable, Hashable {
    public var id: String
    public var name: String
    public var secretSHA256: [UInt8]
    /// `read` or `write`.
    public var scope: String
    /// The bundle ids the key sees; empty: every configured app.
    public var bundleIds: [String]
    public var createdAt: Date
    public var revokedAt: Date?
    public var lastUsedAt: Date?
}

extension CustomerStore {
    public func createAPIKey(id: String, name: String, secretSHA256: [UInt8], scope: String, bundleIds: [String]) async throws {
        try await client.query(
            """
            INSERT INTO api_keys (id, name, secret_sha256, scope, bundle_ids)
            VALUES (\(id), \(name), \(ByteBuffer(bytes: secretSHA256)), \(scope), \(bundleIds)::text[])
            """,
            logger: logger)
    }

    /// Every key, newest first (revoked ones too, with their revocation time).
    public func apiKeys() async throws -> [APIKeyRecord] {
        try await selectAPIKeys(where: nil)
    }

    /// The key named `id`, revoked or not; nil when there is none.
    public func apiKey(id: String) async throws -> APIKeyRecord? {
        try await selectAPIKeys(where: id).first
    }

    /// Revokes `id` now; false when no such key is active.
    @discardableResult
    public func revokeAPIKey(id: String) async throws -> Bool {
        let rows = try await client.query("UPDATE api_keys SET revoked_at = now() WHERE id = \(id) AND revoked_at IS NULL RETURNING id", logger: logger)
        for try await _ in rows.decode(String.self) { return true }
        return false
    }

    private func selectAPIKeys(where id: String?) async throws -> [APIKeyRecord] {
        let rows = try await client.query(
            """
            SELECT id, name, secret_sha256, scope, bundle_ids, created_at, revoked_at, last_used_at FROM api_keys
            WHERE \(id)::text IS NULL OR id = \(id)::text ORDER BY created_at DESC, id
            """,
            logger: logger)
        var keys: [APIKeyRecord] = []
        for try await (id, name, hash, scope, bundleIds, createdAt, revokedAt, lastUsedAt) in rows.decode((String, String, ByteBuffer, String, [String], Date, Date?, Date?).self) {
            keys.append(APIKeyRecord(
                id: id, name: name, secretSHA256: Array(hash.readableBytesView), scope: scope, bundleIds: bundleIds, createdAt: createdAt, revokedAt: revokedAt,
                lastUsedAt: lastUsedAt))
        }
        return keys
    }

    /// Sets `last_used_at` to now unless it was set within the last minute.
    public func touchAPIKey(id: String) async throws {
        try await client.query(
            "UPDATE api_keys SET last_used_at = now() WHERE id = \(id) AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')",
            logger: logger)
    }
}
