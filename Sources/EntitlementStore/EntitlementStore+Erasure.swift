import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

extension EntitlementStore {
    /// The batch without the records about an erased customer that date from before the erasure
    /// (`VerifiedNotification.erasureTime`); those are counted in `outcome.suppressed` and leave no trace: no
    /// delivery, no ledger entry, no archive. Runs first in the batch transaction, under the erasure lock shared
    /// (`ErasureStore.lockKey`), so an erasure is either wholly before the batch or wholly after it.
    ///
    /// One query whatever the batch: the fingerprints of the keys the list was made with, and the entries among the
    /// batch's digests. No key while the list has entries, or another key: `ErasureFailure` (the batch is retried,
    /// the worker is not ready), never a silent pass.
    func withoutErased(_ batch: [StoredNotification], outcome: inout BatchOutcome, on connection: PostgresConnection) async throws -> [StoredNotification] {
        try await connection.query("SELECT pg_advisory_xact_lock_shared(\(ErasureStore.lockKey))", logger: logger)
        var digestsByRecord: [[String]] = []
        var all: Set<String> = []
        if let erasureKey {
            for record in batch {
                let digests = record.verified.erasureIdentifiers.map { Hex.encode(erasureKey.digest($0)) }
                digestsByRecord.append(digests)
                all.formUnion(digests)
            }
        }
        let rows = try await connection.query(
            """
            SELECT key_id, NULL::text, NULL::timestamptz FROM erasure_keys
            UNION ALL
            SELECT NULL, encode(digest, 'hex'), erased_at FROM erasure_suppressions
            WHERE digest = ANY(ARRAY(SELECT decode(d, 'hex') FROM unnest(\(Array(all))::text[]) AS d))
            """,
            logger: logger)
        var keyIds: [String] = []
        var erasedAt: [String: Date] = [:]
        for try await (keyId, digest, at) in rows.decode((String?, String?, Date?).self) {
            if let keyId { keyIds.append(keyId) }
            if let digest, let at { erasedAt[digest] = at }
        }
        guard !keyIds.isEmpty else { return batch }
        guard let erasureKey else { throw ErasureFailure.keyMissing }
        guard keyIds.contains(erasureKey.id) else { throw ErasureFailure.keyMismatch(ours: erasureKey.id, theirs: keyIds.sorted()) }
        guard !erasedAt.isEmpty else { return batch }
        var kept: [StoredNotification] = []
        for (record, digests) in zip(batch, digestsByRecord) {
            let time = record.verified.erasureTime(receivedAt: record.receivedAt).date
            if digests.contains(where: { erasedAt[$0].map { time <= $0 } ?? false }) {
                let kind = EntitlementEventCause(record.verified, key: record.deduplicationKey).kind.rawValue
                outcome.suppressed[kind, default: 0] += 1
                outcome.suppressedKeys.insert(record.deduplicationKey)
            } else {
                kept.append(record)
            }
        }
        return kept
    }

    /// Which of these dead letters claim (unverified) a subscription that was erased: the worker publishes them no
    /// more and records nothing about them (a re-driven record of an erased customer that fails again would
    /// otherwise store its identifiers in `dead_lettered_records`). Empty without a key.
    public func erasedClaims(_ records: [DeadLetteredRecord]) async throws -> Set<RecordPosition> {
        guard let erasureKey else { return [] }
        var byDigest: [String: [RecordPosition]] = [:]
        for record in records {
            guard let bundleId = record.claims.bundleId, let otid = record.claims.originalTransactionId else { continue }
            byDigest[Hex.encode(erasureKey.digest(ErasedIdentifier(.originalTransactionId, bundleId: bundleId, value: otid))), default: []].append(record.position)
        }
        guard !byDigest.isEmpty else { return [] }
        let rows = try await client.query(
            """
            SELECT encode(digest, 'hex') FROM erasure_suppressions
            WHERE digest = ANY(ARRAY(SELECT decode(d, 'hex') FROM unnest(\(Array(byDigest.keys))::text[]) AS d))
            """,
            logger: logger)
        var positions: Set<RecordPosition> = []
        for try await digest in rows.decode(String.self) { positions.formUnion(byDigest[digest] ?? []) }
        return positions
    }

    /// A RESCIND_CONSENT among the batch's new records queues the erasure of what its app transaction links to
    /// (`CONSENT_RESCINDED_ERASES`), in the batch transaction; the worker runs it right after the commit
    /// (`ErasureStore.runPending`). The app transaction id waits in clear in `pending_subject` until then.
    func queueConsentErasures(_ firstSeen: [StoredNotification], on connection: PostgresConnection) async throws {
        guard consentRescindedErases, let erasureKey else { return }
        for record in firstSeen where record.verified.payload.rawNotificationType == "RESCIND_CONSENT" {
            guard let appTransactionId = record.verified.appTransactionInfo?.model.appTransactionId else { continue }
            let subject = ErasureSubject(.appTransactionId, appTransactionId, bundleId: record.verified.bundleId)
            let digest = Hex.encode(erasureKey.digest(subject.identifier))
            let requestId = "consent-" + String(ContentDigest.sha256Hex(record.deduplicationKey).prefix(24))
            try await connection.query(
                """
                INSERT INTO erasure_requests (request_id, bundle_id, subject_kind, subject_digest, reason, requested_by, status, pending_subject)
                VALUES (\(requestId), \(subject.bundleId), \(subject.kind.rawValue), decode(\(digest), 'hex'),
                    'RESCIND_CONSENT (CONSENT_RESCINDED_ERASES)', 'worker:RESCIND_CONSENT', 'pending', \(appTransactionId))
                ON CONFLICT (request_id) DO NOTHING
                """,
                logger: logger)
        }
    }
}
