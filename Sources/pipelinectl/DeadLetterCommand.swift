import AppStoreNotifications
import ArgumentParser
import EntitlementStore
import Foundation
import KafkaClient
import PipelineOperations
import ServiceRuntime

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
            // Streamed: only counts, the newest `limit` (without payloads) and the original positions are kept.
            let since = try filters.since.map(parseISO8601)
            var scan = DeadLetterScan(since: since, errorCode: filters.errorCode, keepNewest: limit)
            try await TopicReader.forEach(configuration.deadLetterTopic, client: try configuration.requireKafka(), logger: toolLogger, since: since, progress: { done, total in
                progress.update(done, of: total)
            }) { record in _ = scan.take(record) }
            let counts = scan.countsByCode
            let newest = scan.newestSorted.reversed()
            if json {
                printJSON(.object(JSONObject([
                    "topic": .string(configuration.deadLetterTopic), "total": .number(JSONNumber(Int64(scan.matched))),
                    "duplicatesSkipped": .number(JSONNumber(Int64(scan.duplicates))),
                    "byErrorCode": .object(JSONObject(members: counts.sorted { $0.key < $1.key }.map { .init(key: $0.key, value: .number(JSONNumber(Int64($0.value)))) })),
                    "newest": .array(newest.map(describe)),
                ])))
                return
            }
            print("\(scan.matched) dead letter(s) in \(configuration.deadLetterTopic)\(scan.duplicates > 0 ? " (\(scan.duplicates) repeated record(s) of the same original not counted)" : "")")
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
            let deadLetterTopic = configuration.deadLetterTopic
            let topic = configuration.topic
            let since = try filters.since.map(parseISO8601)
            let errorCode = filters.errorCode
            let dryRun = dryRun
            let summary = try await configuration.withStore(logger: toolLogger) { store in
                // The re-drive log is part of the schema: a database behind the binary is refused, not migrated
                // from here (migrations are `pipelinectl migrate`'s, under its own lock).
                let pending = try await store.pendingMigrations()
                guard pending.isEmpty else {
                    throw ValidationError("the database lacks migration(s) \(pending.map(\.version)): run `pipelinectl migrate` first")
                }
                // One re-drive at a time: two concurrent runs would both publish what neither recorded yet.
                return try await store.withAdvisoryLock(RedriveSummary.lockKey, name: "dlq redrive") {
                    let alreadyDone = try await store.redrivenDeadLetters(topic: deadLetterTopic)
                    var summary = RedriveSummary()
                    // Only what was dead-lettered before this run: the records it re-drives may fail again and be
                    // dead-lettered while the topic is still being read.
                    var scan = DeadLetterScan(since: since, until: Int64(Date().timeIntervalSince1970 * 1000), errorCode: errorCode, keepNewest: 0)
                    var producer: KafkaProducer?
                    if !dryRun {
                        var producerConfiguration = KafkaProducerConfiguration(client: client)
                        producerConfiguration.deliveryTimeoutMilliseconds = 30_000
                        producer = try KafkaProducer(configuration: producerConfiguration, logger: toolLogger)
                    }
                    let progress = ProgressLine(dryRun ? "reading \(deadLetterTopic)" : "re-driving from \(deadLetterTopic)")
                    do {
                        // Streamed: each dead letter is re-driven as it is read; nothing but positions is kept.
                        try await TopicReader.forEach(deadLetterTopic, client: client, logger: toolLogger, since: since, progress: { done, total in
                            progress.update(done, of: total)
                        }) { record in
                            guard let letter = scan.take(record) else { return }
                            summary.matched += 1
                            guard !alreadyDone.contains(letter.position) else {
                                summary.alreadyRedriven += 1
                                return
                            }
                            // A dead letter about an erased customer is never produced again (docs/privacy.md).
                            guard try await store.erased([letter.erasureClaim]).isEmpty else {
                                summary.erasedHeldBack += 1
                                return
                            }
                            guard let producer else {
                                summary.wouldRedrive.append((letter.position, letter.errorCode))
                                return
                            }
                            let now = Int64(Date().timeIntervalSince1970 * 1000)
                            let report = try await producer.sendAndAwait(DeadLetterOperations.redriveRecord(letter, to: topic, now: now))
                            let to = RecordPosition(topic: report.topic, partition: report.partition, offset: report.offset)
                            // Recorded after the broker acknowledged: a crash in between re-drives it again next time (harmless).
                            try await store.recordRedrive(from: letter.position, errorCode: letter.errorCode, to: to)
                            summary.redriven.append((letter.position, letter.errorCode, to))
                        }
                    } catch {
                        await producer?.close()
                        throw error
                    }
                    await producer?.close()
                    return summary
                }
            }
            if json {
                printJSON(.object(JSONObject([
                    "matched": .number(JSONNumber(Int64(summary.matched))), "alreadyRedriven": .number(JSONNumber(Int64(summary.alreadyRedriven))),
                    "redriven": .number(JSONNumber(Int64(summary.redriven.count))), "dryRun": .bool(dryRun),
                    "erasedHeldBack": .number(JSONNumber(Int64(summary.erasedHeldBack))),
                    "wouldRedrive": .array(summary.wouldRedrive.map { .string($0.0.description) }),
                    "records": .array(summary.redriven.map { from, code, to in
                        .object(JSONObject(["from": .string(from.description), "to": .string(to.description), "errorCode": .string(code)]))
                    }),
                ])))
                return
            }
            print("\(summary.matched) dead letter(s) match, \(summary.alreadyRedriven) already re-driven"
                + (summary.erasedHeldBack > 0 ? ", \(summary.erasedHeldBack) about erased customers held back" : ""))
            if dryRun {
                for (position, code) in summary.wouldRedrive { print("would re-drive \(position.description) (\(code))") }
            } else {
                for (from, code, to) in summary.redriven { print("re-drove \(from.description) (\(code)) → \(to.description)") }
                print("\(summary.redriven.count) re-driven to \(configuration.topic)")
            }
        }
    }
}

/// What one `dlq redrive` did.
struct RedriveSummary: Sendable {
    /// The advisory lock that keeps re-drives one at a time ("redr" in ASCII).
    static let lockKey: Int64 = 0x7265_6472
    var matched = 0
    var alreadyRedriven = 0
    var erasedHeldBack = 0
    var wouldRedrive: [(RecordPosition, String)] = []
    var redriven: [(RecordPosition, String, RecordPosition)] = []
}
