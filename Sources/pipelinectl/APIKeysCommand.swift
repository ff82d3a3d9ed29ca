import AppStoreNotifications
import ArgumentParser
import CustomerAPI
import EntitlementStore
import Foundation
import ServiceRuntime
import SharedSettings

/// `pipelinectl api-keys create|list|revoke`: the keys app backends present to the customer API.
struct APIKeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api-keys", abstract: "Manage the customer API's keys (only their SHA-256 is stored).", subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create", abstract: "Create a key and print it once: store it in your backend's secrets now, it cannot be shown again.")

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "A name for people (which backend uses it).") var name: String
        @Option(help: "A bundle id the key sees (repeatable); none: every configured app.") var bundleId: [String] = []
        @Option(help: "read (lookups), write (purchases, and reads), erase (erasures only: DELETE customers) or offers (offer decisions and signatures only).") var scope = "read"
        @Flag(help: "Print {\"id\", \"name\", \"secret\", \"scope\", \"bundleIds\"}.") var json = false

        func validate() throws {
            guard APIKeyScope(rawValue: scope) != nil else { throw ValidationError("--scope must be read, write, erase or offers, not \(UntrustedText.quoted(scope))") }
            guard !name.isEmpty, name.utf8.count <= 200 else { throw ValidationError("--name must be 1 to 200 bytes") }
        }

        func run() async throws {
            // A key for an app the services do not serve answers nothing but refusals: say so (a warning, since the
            // app may be added to APPS later).
            if let apps = ProcessInfo.processInfo.environment["APPS"], let configured = try? PipelineSettings.parseApps(apps) {
                for unknown in bundleId where !configured.contains(where: { $0.bundleId == unknown }) {
                    FileHandle.standardError.write(Data("warning: \(UntrustedText.quoted(unknown, limit: 100)) is not in APPS; the customer API refuses its requests until it is\n".utf8))
                }
            }
            let key = APIKeySecret.generate()
            let (name, scope, bundleIds) = (name, scope, bundleId)
            try await connection.withMigratedStore { store in
                try await store.customers.createAPIKey(id: key.id, name: name, secretSHA256: key.hash, scope: scope, bundleIds: bundleIds)
            }
            printCreated(
                json: json,
                JSONObject([
                    "id": .string(key.id), "name": .string(name), "secret": .string(key.text), "scope": .string(scope), "bundleIds": .array(bundleIds.map { .string($0) }),
                ]),
                summary: "created \(key.id) (\(scope), \(bundleIds.isEmpty ? "every app" : bundleIds.joined(separator: ", ")))", secret: ("key", key.text))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the keys (never their secrets).")

        @OptionGroup var listing: ListingOptions

        func run() async throws {
            try await listing.list(header: "ID                SCOPE  STATE    CREATED                   NAME / BUNDLE IDS") { store in
                try await store.customers.apiKeys()
            } object: { key in
                JSONObject([
                    "id": .string(key.id), "name": .string(key.name), "scope": .string(key.scope), "bundleIds": .array(key.bundleIds.map { .string($0) }),
                    "createdAt": .string(listedTime(key.createdAt)), "revokedAt": key.revokedAt.map { .string(listedTime($0)) } ?? .null,
                    "lastUsedAt": key.lastUsedAt.map { .string(listedTime($0)) } ?? .null,
                ])
            } line: { key in
                let state = key.revokedAt == nil ? "active " : "revoked"
                return "\(key.id)  \(key.scope.padding(toLength: 5, withPad: " ", startingAt: 0))  \(state)  \(listedTime(key.createdAt))  \(UntrustedText.escaped(key.name, limit: 60)) / \(key.bundleIds.isEmpty ? "every app" : key.bundleIds.joined(separator: ","))"
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Revoke a key: refused from the next request on.")

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The key's id (key_…).") var id: String

        func run() async throws {
            let id = id
            let revoked = try await connection.withMigratedStore { store in
                return try await store.customers.revokeAPIKey(id: id)
            }
            guard revoked else { throw ToolFailure("no active key \(UntrustedText.quoted(id))") }
            print("revoked \(id)")
        }
    }
}

/// Refuses to run against a database that lacks migrations (with the command that fixes it).
func requireMigrated(_ store: EntitlementStore) async throws {
    let pending = try await store.pendingMigrations()
    guard pending.isEmpty else { throw ValidationError("the database lacks migration(s) \(pending.map(\.version)): run `pipelinectl migrate` first") }
}
