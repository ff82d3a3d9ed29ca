import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

extension EntitlementStore {
    /// The batch without the records about an erased customer that date from before the erasure
    /// (`VerifiedNotification.erasureTime`); those are counted in `outcome.suppressed` and leave no trace: no
    /// delivery, no ledger entry, no archive. Runs in the batch transaction after `write` took the erasure lock
    /// shared (`ErasureStore.lockKey`), so an erasure is either wholly before the batch or wholly after it.
    func withoutErased(_ batch: [StoredNotification], outcome: inout BatchOutcome, on connection: PostgresConnection) async throws -> [StoredNotification] {
        let claims = batch.map { record in
            ErasureClaim(
                bundleId: record.verified.bundleId, identifiers: record.verified.erasureIdentifiers,
                time: record.verified.erasureTime(receivedAt: record.receivedAt).date)
        }
        let erased = try await erased(claims, on: connection)
        guard !erased.isEmpty else { return batch }
        var kept: [StoredNotification] = []
        for (index, record) in batch.enumerated() {
            if erased.contains(index) {
                let kind = EntitlementEventCause(record.verified, key: record.deduplicationKey).kind.rawValue
                outcome.suppressed[kind, default: 0] += 1
                outcome.suppressedKeys.insert(record.deduplicationKey)
            } else {
                kept.append(record)
            }
        }
        return kept
    }

    /// Which of `claims` are about an erased identifier at a time on or before its erasure (a claim without a time:
    /// any erasure of its identifiers). The pull side, re-drives and the worker's dead letters ask this before they
    /// produce or record anything, so an erased customer's records never reach the topic or a table again.
    ///
    /// One query whatever the number of claims: the fingerprints of the keys the list was made with, and the entries
    /// among the claims' digests. No key while the list has entries, or another key: `ErasureFailure` (the caller
    /// stops or retries), never a silent pass.
    public func erased(_ claims: [ErasureClaim?]) async throws -> Set<Int> {
        try await erasedIndices(claims) { try await client.query($0, logger: logger) }
    }

    /// `erased(_:)` on a transaction's connection (after it took the erasure lock shared).
    public func erased(_ claims: [ErasureClaim?], on connection: PostgresConnection) async throws -> Set<Int> {
        try await erasedIndices(claims) { try await connection.query($0, logger: logger) }
    }

    func erasedIndices(_ claims: [ErasureClaim?], query: (PostgresQuery) async throws -> PostgresRowSequence) async throws -> Set<Int> {
        var digestsByClaim: [[String]] = []
        var all: Set<String> = []
        if let erasureKey {
            for claim in claims {
                let digests = claim?.identifiers.map { Hex.encode(erasureKey.digest($0)) } ?? []
                digestsByClaim.append(digests)
                all.formUnion(digests)
            }
        }
        let rows = try await query(
            """
            SELECT key_id, NULL::text, NULL::timestamptz FROM erasure_keys
            UNION ALL
            SELECT NULL, encode(digest, 'hex'), erased_at FROM erasure_suppressions
            WHERE digest = ANY(ARRAY(SELECT decode(d, 'hex') FROM unnest(\(Array(all))::text[]) AS d))
            """)
        var keyIds: [String] = []
        var erasedAt: [String: Date] = [:]
        for try await (keyId, digest, at) in rows.decode((String?, String?, Date?).self) {
            if let keyId { keyIds.append(keyId) }
            if let digest, let at { erasedAt[digest] = at }
        }
        guard !keyIds.isEmpty else { return [] }
        guard let erasureKey else { throw ErasureFailure.keyMissing }
        guard keyIds.contains(erasureKey.id) else { throw ErasureFailure.keyMismatch(ours: erasureKey.id, theirs: keyIds.sorted()) }
        guard !erasedAt.isEmpty else { return [] }
        var erased: Set<Int> = []
        for (index, (claim, digests)) in zip(claims, digestsByClaim).enumerated() {
            let time = claim?.time
            if digests.contains(where: { digest in erasedAt[digest].map { erasure in time.map { $0 <= erasure } ?? true } ?? false }) { erased.insert(index) }
        }
        return erased
    }

    /// Which of these dead letters claim (unverified) an erased customer: the worker publishes them no more and
    /// records nothing about them (a re-driven record of an erased customer that fails again would otherwise store
    /// its identifiers in `dead_lettered_records`). Checked again inside the batch transaction, under the erasure
    /// lock, before their positions are recorded. Empty without a key.
    public func erasedClaims(_ records: [DeadLetteredRecord]) async throws -> Set<RecordPosition> {
        guard erasureKey != nil else { return [] }
        let erased = try await erased(records.map(\.erasureClaim))
        return Set(erased.map { records[$0].position })
    }

    /// The dead letters whose claims are not erased, checked on the batch's connection under the lock.
    func withoutErasedClaims(_ records: [DeadLetteredRecord], on connection: PostgresConnection) async throws -> [DeadLetteredRecord] {
        guard erasureKey != nil, !records.isEmpty else { return records }
        let erased = try await erased(records.map(\.erasureClaim), on: connection)
        return records.enumerated().filter { !erased.contains($0.offset) }.map(\.element)
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
                ON CONFLICT (bundle_id, request_id) DO NOTHING
                """,
                logger: logger)
        }
    }
}
