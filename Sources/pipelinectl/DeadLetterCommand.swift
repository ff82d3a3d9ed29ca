import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import Foundation
import KafkaClient
import NotificationPipeline

/// `pipelinectl dlq list|redrive`.
struct DeadLetterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dlq", abstract: "Inspect and re-drive the dead-letter topic.", subcommands: [List.self, Redrive.self])

    struct Filters: ParsableArguments {
        @Option(help: "Only dead letters from this time on (ISO-8601, e.g. 2026-11-20T10:00:00Z).") var since: String?
        @Option(name: .customLong("error"), help: "Only dead letters with this error code (e.g. bundleIdMismatch).") var errorCode: String?
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list", abstract: "Count dead letters by error code and show the newest with their headers (never the payload).")

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var filters: Filters
        @Option(help: "How many of the newest to show.") var limit = 10
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let configuration = try connection.configuration()
            let progress = ProgressLine("reading \(configuration.deadLetterTopic)")
            let records = try await TopicReader.readAll(configuration.deadLetterTopic, client: try configuration.requireKafka(), logger: toolLogger) { done, total in
                progress.update(done, of: total)
            }
            let letters = DeadLetterOperations.list(records, since: try filters.since.map(parseISO8601), errorCode: filters.errorCode)
            var counts: [String: Int] = [:]
            for letter in letters { counts[letter.errorCode, default: 0] += 1 }
            let newest = letters.suffix(limit).reversed()
            if json {
                printJSON(.object(JSONObject([
                    "topic": .string(configuration.deadLetterTopic), "total": .number(JSONNumber(Int64(letters.count))),
                    "byErrorCode": .object(JSONObject(members: counts.sorted { $0.key < $1.key }.map { .init(key: $0.key, value: .number(JSONNumber(Int64($0.value)))) })),
                    "newest": .array(newest.map(describe)),
                ])))
                return
            }
            print("\(letters.count) dead letter(s) in \(configuration.deadLetterTopic)")
            for (code, count) in counts.sorted(by: { ($1.value, $0.key) < ($0.value, $1.key) }) { print("  \(count)\t\(code)") }
            for letter in newest {
                print("\(letter.position.description)  failed \(Timestamp(millisecondsSince1970: letter.time))  \(letter.errorCode)\(letter.errorCause.map { " (cause \($0))" } ?? "")")
                print("    \(letter.errorReason)")
                for header in letter.record.headers {
                    // Header text is the attacker's as much as ours: escaped, bounded, never raw on a terminal.
                    print("    \(UntrustedText.escaped(header.key, limit: 64)): \(header.stringValue.map { UntrustedText.escaped($0, limit: 200) } ?? "<\(header.value?.count ?? 0) bytes>")")
                }
            }
        }

        func describe(_ letter: DeadLetter) -> JSONValue {
            .object(JSONObject([
                "position": .string(letter.position.description), "errorCode": .string(letter.errorCode), "errorReason": .string(letter.errorReason),
                "errorCause": jsonValue(letter.errorCause), "failedAt": jsonValue(Timestamp(millisecondsSince1970: letter.time)),
                "original": jsonValue(letter.original?.description), "redriveCount": .number(JSONNumber(Int64(letter.redriveCount))),
                "headers": .object(JSONObject(members: letter.record.headers.map { .init(key: $0.key, value: jsonValue($0.stringValue)) })),
            ]))
        }
    }

    struct Redrive: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "redrive",
            abstract: "Re-publish dead-lettered payloads, unchanged, to the notifications topic.",
            discussion: """
                Use after fixing what made them fail (an app missing from APPS, a root missing from TRUSTED_ROOTS).
                Each re-driven dead letter is recorded in PostgreSQL (dead_letter_redrives), so a re-run never
                re-drives it twice; a payload that fails again is dead-lettered again, as a new record. Forged
                payloads fail again with the same reason. Re-publishing is harmless even if repeated: the workers
                deduplicate by notificationUUID.
                """)

        @OptionGroup var connection: ConnectionOptions
        @OptionGroup var filters: Filters
        @Flag(help: "Show what would be re-driven without publishing.") var dryRun = false
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let configuration = try connection.configuration()
            let client = try configuration.requireKafka()
            let records = try await TopicReader.readAll(configuration.deadLetterTopic, client: client, logger: toolLogger)
            let candidates = DeadLetterOperations.list(records, since: try filters.since.map(parseISO8601), errorCode: filters.errorCode)
            let deadLetterTopic = configuration.deadLetterTopic
            let alreadyDone = try await configuration.withStore(logger: toolLogger) { store in
                _ = try await store.migrate()  // the re-drive log is part of the schema
                return try await store.redrivenDeadLetters(topic: deadLetterTopic)
            }
            let pending = candidates.filter { !alreadyDone.contains($0.position) }
            var redriven: [(DeadLetter, RecordPosition)] = []
            if !dryRun && !pending.isEmpty {
                var producerConfiguration = KafkaProducerConfiguration(client: client)
                producerConfiguration.deliveryTimeoutMilliseconds = 30_000
                let producer = try KafkaProducer(configuration: producerConfiguration, logger: toolLogger)
                let progress = ProgressLine("re-driving")
                let topic = configuration.topic
                redriven = try await configuration.withStore(logger: toolLogger) { store in
                    var done: [(DeadLetter, RecordPosition)] = []
                    for letter in pending {
                        let now = Int64(Date().timeIntervalSince1970 * 1000)
                        let report = try await producer.sendAndAwait(DeadLetterOperations.redriveRecord(letter, to: topic, now: now))
                        let to = RecordPosition(topic: report.topic, partition: report.partition, offset: report.offset)
                        // Recorded after the broker acknowledged: a crash in between re-drives it again next time (harmless).
                        try await store.recordRedrive(from: letter.position, errorCode: letter.errorCode, to: to)
                        done.append((letter, to))
                        progress.update(done.count, of: Int64(pending.count))
                    }
                    return done
                }
                await producer.close()
            }
            if json {
                printJSON(.object(JSONObject([
                    "matched": .number(JSONNumber(Int64(candidates.count))), "alreadyRedriven": .number(JSONNumber(Int64(candidates.count - pending.count))),
                    "redriven": .number(JSONNumber(Int64(redriven.count))), "dryRun": .bool(dryRun),
                    "wouldRedrive": .array(dryRun ? pending.map { .string($0.position.description) } : []),
                    "records": .array(redriven.map { letter, to in
                        .object(JSONObject(["from": .string(letter.position.description), "to": .string(to.description), "errorCode": .string(letter.errorCode)]))
                    }),
                ])))
                return
            }
            print("\(candidates.count) dead letter(s) match, \(candidates.count - pending.count) already re-driven")
            if dryRun {
                for letter in pending { print("would re-drive \(letter.position.description) (\(letter.errorCode))") }
            } else {
                for (letter, to) in redriven { print("re-drove \(letter.position.description) (\(letter.errorCode)) → \(to.description)") }
                print("\(redriven.count) re-driven to \(configuration.topic)")
            }
        }
    }
}
