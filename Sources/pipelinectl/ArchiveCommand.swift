import AppStoreNotifications
import ArgumentParser
import Foundation

/// `pipelinectl archive`: read an archived notification back exactly, and move old rows to the compact form.
struct ArchiveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "archive",
        abstract: "Read archived notifications back, and compact rows archived before migration 13.",
        subcommands: [Show.self, Compact.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show one archived notification: its fields and decoded payload, or with --raw the exact signedPayload.",
            discussion: """
                --raw prints the signedPayload Apple signed, byte for byte, rebuilt from the archive's parts, on one line:
                `pipelinectl archive show --uuid U --raw | pipelinectl verify` verifies it again.
                Exit status 1 when no notification has that UUID.
                """)

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The notificationUUID.") var uuid: String
        @Flag(help: "Print only the exact signedPayload (a JWS), one line.") var raw = false
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let found = try await connection.configuration().withStore(logger: toolLogger) { store in
                try await store.archivedNotification(uuid: uuid)
            }
            guard let row = found else {
                FileHandle.standardError.write(Data("no archived notification has notificationUUID \(UntrustedText.quoted(uuid))\n".utf8))
                throw ExitCode(1)
            }
            if raw {
                print(row.signedPayload)
                return
            }
            let payload = (try? StrictJSONParser().parse(Array(row.payload.utf8))) ?? .string(row.payload)
            let object = JSONValue.object(JSONObject([
                "notificationUUID": .string(row.notificationUUID), "notificationType": .string(row.notificationType), "subtype": jsonValue(row.subtype),
                "signedDate": jsonValue(row.signedDate), "environment": .string(row.environment), "bundleId": .string(row.bundleId),
                "originalTransactionId": jsonValue(row.originalTransactionId), "storedAt": jsonValue(row.storedAt), "source": jsonValue(row.source),
                "storage": .string(row.compact ? "compact" : "raw"), "signedPayloadBytes": .number(JSONNumber(Int64(row.signedPayload.utf8.count))),
                "payload": payload,
            ]))
            if json {
                printJSON(object)
            } else {
                print("\(row.notificationType)\(row.subtype.map { "/" + $0 } ?? "") \(row.notificationUUID)")
                print("  signed \(row.signedDate.formatted(.iso8601))  stored \(row.storedAt.formatted(.iso8601))  \(row.environment) \(row.bundleId)")
                print("  originalTransactionId \(row.originalTransactionId ?? "-")  source \(row.source ?? "-")")
                print("  stored \(row.compact ? "compact (chains once, payloads as JSON text)" : "raw")  signedPayload \(row.signedPayload.utf8.count) bytes")
                print("  payload \(row.payload)")
            }
        }
    }

    struct Compact: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Move notifications archived raw (before migration 13) to the compact form, in small transactions.",
            discussion: """
                Each batch is its own transaction and locks only its rows (SKIP LOCKED): workers keep writing meanwhile.
                Stop it at any time and run it again: it resumes with the rows still raw. Rows that would not rebuild
                byte for byte (not a JWS) stay raw and are counted.
                """)

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "Rows per transaction.") var batchSize = 500
        @Option(help: "Stop after this many batches (run it again later to go on).") var maxBatches: Int?
        @Flag(help: "Print JSON.") var json = false

        func validate() throws {
            guard (1...10_000).contains(batchSize) else { throw ValidationError("--batch-size must be 1…10000") }
        }

        func run() async throws {
            let quiet = json
            let result = try await connection.configuration().withStore(logger: toolLogger) { store in
                try await store.compactArchive(batchSize: batchSize, maximumBatches: maxBatches ?? .max) { progress in
                    if !quiet { FileHandle.standardError.write(Data("compacted \(progress.moved), kept raw \(progress.keptRaw)\n".utf8)) }
                }
            }
            if json {
                printJSON(.object(JSONObject(["moved": .number(JSONNumber(Int64(result.moved))), "keptRaw": .number(JSONNumber(Int64(result.keptRaw)))])))
            } else {
                print("moved \(result.moved) rows to the compact form; \(result.keptRaw) stay raw (they do not rebuild exactly)")
            }
        }
    }
}
