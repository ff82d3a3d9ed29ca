import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import Foundation
import PipelineConfiguration
import SharedSettings

/// `pipelinectl customers erase|erasure|erasures`: erase a customer everywhere the pipeline keeps them
/// (docs/privacy.md) and read erasures back.
struct CustomersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "customers", abstract: "Erase a customer (GDPR, CCPA) and read erasures back.", subcommands: [Erase.self, Erasure.self, Erasures.self, ErasureKeyFile.self])

    struct Erase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "erase",
            abstract: "Erase a customer in one transaction and keep them erased through replays, backfills, reconciles and re-drives.",
            discussion: """
                Name the customer by one of --customer-id (the customer API's id), --app-account-token,
                --original-transaction-id or --app-transaction-id. Everything linked to it within the app is resolved
                (subscriptions, previousOriginalTransactionId chains, transactions, tokens, notifications), deleted, and
                kept as keyed digests (ERASURE_KEY_FILE, the same key the workers hold) so a record from before the
                erasure is acknowledged and not stored. Emits customer.erased with the request id as its subject.
                Prints the request id and what was removed (counts, never identifiers).
                """)

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The customer API's customer id (a UUID).") var customerId: String?
        @Option(help: "An appAccountToken.") var appAccountToken: String?
        @Option(help: "An originalTransactionId.") var originalTransactionId: String?
        @Option(help: "An appTransactionId.") var appTransactionId: String?
        @Option(help: "The app.") var bundleId: String
        @Option(help: "Why (a ticket number; no personal data). Kept with the erasure.") var reason: String
        @Option(help: "Your own id for this erasure (letters, digits, ._:-, at most 64); default a new one.") var requestId: String?
        @Flag(help: "Print the erasure as JSON.") var json = false

        var subject: ErasureSubject? {
            let given: [(ErasureSubject.Kind, String?)] = [
                (.customerId, customerId), (.appAccountToken, appAccountToken), (.originalTransactionId, originalTransactionId),
                (.appTransactionId, appTransactionId),
            ]
            let named = given.compactMap { kind, value in value.map { (kind, $0) } }
            guard named.count == 1, let (kind, value) = named.first else { return nil }
            return ErasureSubject(kind, value, bundleId: bundleId)
        }

        func validate() throws {
            guard subject != nil else {
                throw ValidationError("name the customer by exactly one of --customer-id, --app-account-token, --original-transaction-id, --app-transaction-id")
            }
            guard let value = subject?.value, !value.isEmpty, value.utf8.count <= 200 else { throw ValidationError("the identifier must be 1 to 200 bytes") }
            guard !reason.isEmpty, reason.utf8.count <= 200 else { throw ValidationError("--reason must be 1 to 200 bytes") }
            if let requestId, !ErasureRequest.isValidRequestId(requestId) {
                throw ValidationError("--request-id must be 1 to 64 letters, digits or ._:-")
            }
        }

        func run() async throws {
            guard let key = try PipelineSettings.erasureKey(EnvironmentReader()) else {
                throw ToolFailure("no erasure key: set ERASURE_KEY_FILE to the file the workers read (the same key, or they cannot check the erasure)")
            }
            guard let subject else { return }
            let request = ErasureRequest(requestId: requestId ?? ErasureRequest.newRequestId(), subject: subject, reason: reason, requestedBy: "pipelinectl")
            let events = try connection.configuration().events.enabled
            let report = try await connection.withMigratedStore { store in
                try await ErasureStore(client: store.client, logger: toolLogger).erase(request, key: key, emitsEvents: events)
            }
            printReport(report, json: json)
        }
    }

    struct Erasure: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "erasure", abstract: "Show one erasure by its request id.")

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The erasure's request id.") var requestId: String
        @Option(help: "The app (request ids are scoped by app); without it, the newest erasure with this id.") var bundleId: String?
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let (id, bundleId) = (requestId, bundleId)
            guard let report = try await connection.withMigratedStore({ store in
                try await ErasureStore(client: store.client, logger: toolLogger).report(requestId: id, bundleId: bundleId)
            }) else {
                throw ToolFailure("no erasure with request id \(UntrustedText.quoted(requestId, limit: 70))")
            }
            printReport(report, json: json)
        }
    }

    struct Erasures: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "erasures", abstract: "List recent erasures, newest first.")

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "How many.") var limit = 50
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let limit = limit
            let reports = try await connection.withMigratedStore { store in try await ErasureStore(client: store.client, logger: toolLogger).recentReports(limit: limit) }
            if json {
                printJSON(.array(reports.map { .object($0.json) }))
            } else {
                for report in reports { printReport(report, json: false) }
            }
        }
    }
}

extension CustomersCommand {
    /// `pipelinectl customers erasure-key`: the key file every eraser and worker shares, created once.
    struct ErasureKeyFile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "erasure-key",
            abstract: "Check the erasure key file (or create it once) and print its fingerprint.",
            discussion: """
                The fingerprint is public: it is stored beside every suppression entry, so a worker given another key
                stops instead of missing them. Created keys are 32 random bytes as 64 hex digits, mode 0400. Never
                replace a key while erasures are on record: their entries could no longer be checked.
                """)

        @Option(help: "The key file (default: $ERASURE_KEY_FILE).") var file: String?
        @Flag(help: "Create the file with a new key when it does not exist (an existing one is kept).") var createIfMissing = false

        func run() async throws {
            guard let path = file ?? ProcessInfo.processInfo.environment["ERASURE_KEY_FILE"] else {
                throw ValidationError("name the key file: --file or ERASURE_KEY_FILE")
            }
            var created = false
            if !FileManager.default.fileExists(atPath: path) {
                guard createIfMissing else { throw ToolFailure("\(UntrustedText.quoted(path, limit: 200)) does not exist (--create-if-missing makes one)") }
                var bytes = [UInt8](repeating: 0, count: 32)
                for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255) }
                guard FileManager.default.createFile(atPath: path, contents: Data((Hex.encode(bytes) + "\n").utf8), attributes: [.posixPermissions: 0o400]) else {
                    throw ToolFailure("could not create \(UntrustedText.quoted(path, limit: 200))")
                }
                created = true
            }
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw ToolFailure("\(UntrustedText.quoted(path, limit: 200)) cannot be read") }
            let key: ErasureKey
            do {
                key = try ErasureKey(secret: text)
            } catch {
                throw ToolFailure("\(UntrustedText.quoted(path, limit: 200)): \(error)")
            }
            print("\(created ? "created" : "found") \(path): fingerprint \(key.id)")
        }
    }
}

func printReport(_ report: ErasureReport, json: Bool) {
    if json {
        printJSON(.object(report.json))
        return
    }
    let counts = report.counts.filter { $0.value > 0 }.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    print("\(report.requestId): \(report.status) (\(report.bundleId), by \(report.requestedBy), \(report.requestedAt.formatted(.iso8601))): \(counts.isEmpty ? "nothing found" : counts)")
}
