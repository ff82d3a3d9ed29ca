import AppStoreNotifications
import EntitlementStore
import Foundation
import KafkaClient
import Logging
import NotificationRecords

/// A record of the dead-letter topic, with what its headers say.
package struct DeadLetter: Sendable {
    package var record: KafkaConsumerMessage
    package var errorCode: String
    package var errorReason: String
    package var errorCause: String?
    package var original: RecordPosition?
    /// When the worker dead-lettered it (ms since 1970).
    package var failedAt: Int64?
    /// Earlier re-drives of this payload (each one that failed again added a dead letter).
    package var redriveCount: Int

    package init(_ record: KafkaConsumerMessage) {
        self.record = record
        let headers = record.headers
        // Headers of records already on the topic may hold attacker text written before reasons were escaped.
        errorCode = headers.string(DeadLetterHeader.errorCode).map { UntrustedText.escaped($0, limit: 64) } ?? "unknown"
        errorReason = headers.string(DeadLetterHeader.errorReason).map { UntrustedText.escaped($0, limit: 400) } ?? ""
        errorCause = headers.string(DeadLetterHeader.errorCause).map { UntrustedText.escaped($0, limit: 64) }
        if let topic = headers.string(DeadLetterHeader.originalTopic), let partition = headers.string(DeadLetterHeader.originalPartition).flatMap(Int32.init),
           let offset = headers.string(DeadLetterHeader.originalOffset).flatMap(Int64.init) {
            original = RecordPosition(topic: topic, partition: partition, offset: offset)
        }
        failedAt = headers.string(DeadLetterHeader.failedAt).flatMap(Int64.init)
        redriveCount = headers.string(RedriveHeader.count).flatMap(Int.init) ?? 0
    }

    package var position: RecordPosition { RecordPosition(topic: record.topic, partition: record.partition, offset: record.offset) }

    /// When it was dead-lettered: the failed-at header, else the record's timestamp.
    package var time: Int64 { failedAt ?? record.timestamp ?? 0 }

    /// What it claims, for the erasure screen (`DeadLetteredRecord.erasureClaim`: any erasure holds it back).
    package var erasureClaim: ErasureClaim? {
        DeadLetteredRecord(position: position, errorCode: errorCode, payload: record.value).erasureClaim
    }
}

/// The dead letters matching filters, taken one record at a time: what `dlq list` and `dlq redrive` keep is
/// bounded (counts per code, the newest `keepNewest` without their payloads, and the original positions seen,
/// for deduplication), never the topic's payloads.
package struct DeadLetterScan: Sendable {
    package let since: Int64?
    /// Dead letters written at or after this time are not taken: a re-drive that streams the topic would
    /// otherwise meet the dead letters its own re-driven records produce, and re-drive them again, forever.
    package let until: Int64?
    package let errorCode: String?
    package let keepNewest: Int
    package private(set) var matched = 0
    package private(set) var duplicates = 0
    package private(set) var countsByCode: [String: Int] = [:]
    /// The newest matches, oldest first, with their values dropped.
    package private(set) var newest: [DeadLetter] = []
    private var originals: Set<RecordPosition> = []

    package init(since: Int64?, until: Int64? = nil, errorCode: String?, keepNewest: Int) {
        self.since = since
        self.until = until
        self.errorCode = errorCode
        self.keepNewest = keepNewest
    }

    /// The dead letter in `record` when it matches the filters and is the first for its original record.
    package mutating func take(_ record: KafkaConsumerMessage) -> DeadLetter? {
        let letter = DeadLetter(record)
        guard since.map({ letter.time >= $0 }) ?? true, until.map({ letter.time < $0 }) ?? true, errorCode.map({ letter.errorCode == $0 }) ?? true
        else { return nil }
        if let original = letter.original, !originals.insert(original).inserted {
            duplicates += 1
            return nil
        }
        matched += 1
        countsByCode[letter.errorCode, default: 0] += 1
        if keepNewest > 0 {
            var kept = letter
            kept.record.value = []
            newest.append(kept)
            if newest.count > keepNewest * 2 { newest = Array(newest.sorted { ($0.time, $0.position) < ($1.time, $1.position) }.suffix(keepNewest)) }
        }
        return letter
    }

    /// The newest kept, oldest first.
    package var newestSorted: [DeadLetter] { Array(newest.sorted { ($0.time, $0.position) < ($1.time, $1.position) }.suffix(keepNewest)) }
}

package enum DeadLetterOperations {
    /// The record to re-publish (`RedriveRecord`, the console's too).
    package static func redriveRecord(_ letter: DeadLetter, to topic: String, now: Int64) -> KafkaProducerMessage {
        RedriveRecord.make(
            value: letter.record.value, key: letter.record.key, deadLetterHeaders: letter.record.headers, from: letter.position.description, to: topic, now: now)
    }
}
