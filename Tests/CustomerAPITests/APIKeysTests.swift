import AppStoreNotifications
import CustomerAPI
import EntitlementStore
import Foundation
import Logging
import PostgresNIO
import Testing
import PipelineTestSupport
import TestGates

@Suite("Customer API keys: the secret's shape, hashing and the constant-time check")
struct APIKeySecretTests {
    @Test("a generated key parses back, hashes to what is stored, and matches only itself")
    func roundTrip() throws {
        let key = APIKeySecret.generate()
        #expect(key.text.hasPrefix("ak_\(key.id)_") && key.id.count == 16)
        let presented = try #require(APIKeySecret(presented: key.text))
        #expect(presented.id == key.id && presented.hash == key.hash && key.hash.count == 32)
        #expect(APIKeySecret.matches(presented, stored: key.hash))
        #expect(!APIKeySecret.matches(presented, stored: APIKeySecret.generate().hash), "another key's hash")
        #expect(!APIKeySecret.matches(nil, stored: key.hash) && !APIKeySecret.matches(presented, stored: nil), "unknown id or unparseable key")
        var tampered = Array(key.text)
        tampered[tampered.count - 1] = tampered.last == "A" ? "B" : "A"
        #expect(!APIKeySecret.matches(APIKeySecret(presented: String(tampered)), stored: key.hash))
        #expect(Set((0..<50).map { _ in APIKeySecret.generate().text }).count == 50)
    }

    @Test("anything not of the key's shape is refused before any lookup", arguments: [
        "", "Bearer x", "ak_key_0123456789ab", "ak_key_0123456789ab_short", "ak_key_0123456789zz_" + String(repeating: "a", count: 43),
        "ak_key_0123456789ab_" + String(repeating: "a", count: 42) + "+", "ak_key_0123456789ab_" + String(repeating: "a", count: 200),
    ])
    func malformed(_ text: String) {
        #expect(APIKeySecret(presented: text) == nil)
    }

    @Test("write includes read; read does not include write")
    func scopes() {
        #expect(APIKeyScope.write.allows(.read) && APIKeyScope.write.allows(.write) && APIKeyScope.read.allows(.read) && !APIKeyScope.read.allows(.write))
    }
}

@Suite("pipelinectl api-keys against a real PostgreSQL", .serialized, .requiresPostgres)
struct APIKeysCommandTests {
    func pipelinectl(_ arguments: [String], database: String) async throws -> (status: Int32, output: String) {
        try await runPipelinectl(arguments, postgresURL: database, includeErrors: true)
    }

    @Test("create prints the key once, only its SHA-256 is stored, list never shows it, revoke ends it")
    func lifecycle() async throws {
        let database = try await TestDatabase.createMigrated("k")

        let created = try await pipelinectl(["api-keys", "create", "--name", "backend", "--bundle-id", "com.example.a", "--bundle-id", "com.example.b", "--scope", "write", "--json"], database: database)
        #expect(created.status == 0, "\(created.output)")
        let json = try StrictJSONParser().parseObject(Array(created.output.utf8))
        let secret = try #require(json["secret"]?.stringValue)
        let id = try #require(json["id"]?.stringValue)
        #expect(json["scope"] == .string("write") && json["bundleIds"] == .array([.string("com.example.a"), .string("com.example.b")]) && json["name"] == .string("backend"))
        let key = try #require(APIKeySecret(presented: secret))
        #expect(key.id == id)

        let stored = try await TestDatabase.with(database) { client in
            let store = EntitlementStore(client: client, logger: ingestTestLogger)
            return try await store.customers.apiKey(id: id)
        }
        #expect(stored.map { APIKeySecret.matches(key, stored: $0.secretSHA256) } == true, "the stored hash is the key's")
        let dump = try await TestDatabase.with(database) { client in
            try await client.query("SELECT row_to_json(k)::text FROM api_keys k", logger: ingestTestLogger).decode(String.self).reduce("", +)
        }
        #expect(!dump.contains(secret) && !dump.contains(String(secret.suffix(43))), "the key itself is nowhere in the table")

        let listed = try await pipelinectl(["api-keys", "list", "--json"], database: database)
        #expect(listed.status == 0 && !listed.output.contains(String(secret.suffix(43))), "\(listed.output)")
        let rows = try StrictJSONParser().parse(Array(listed.output.utf8))
        guard case .array(let keys) = rows else { Issue.record("not an array: \(listed.output)"); return }
        #expect(keys.count == 1 && keys.first?.objectValue?["revokedAt"] == .null && keys.first?.objectValue?["secret"] == nil)

        #expect(try await pipelinectl(["api-keys", "revoke", "--id", id], database: database).status == 0)
        let again = try await pipelinectl(["api-keys", "revoke", "--id", id], database: database)
        #expect(again.status != 0 && again.output.contains("no active key"), "\(again.output)")
        let after = try await pipelinectl(["api-keys", "list"], database: database)
        #expect(after.output.contains(id) && after.output.contains("revoked"), "\(after.output)")
        #expect(try await pipelinectl(["api-keys", "create", "--name", "x", "--scope", "admin"], database: database).status != 0, "an unknown scope is refused")
    }
}
