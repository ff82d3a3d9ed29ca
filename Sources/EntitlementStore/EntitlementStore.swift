import AppStoreNotifications
import Foundation
import Logging
import PipelineConfiguration
import PostgresNIO

/// A verified notification ready to be stored, with where it came from.
public struct StoredNotification: Sendable {
    public var verified: VerifiedNotification
    /// The raw JWS as received (UTF-8). Bytes, not a `String`: the worker hands over the Kafka record's own buffer
    /// (shared, not copied: one copy less of ≈16 KB per record in flight).
    public var signedPayloadBytes: [UInt8]
    /// The raw JWS as text, archived as received when it does not take apart.
    public var signedPayload: String { String(decoding: signedPayloadBytes, as: UTF8.self) }
    public var kafkaTopic: String?
    public var kafkaPartition: Int32?
    public var kafkaOffset: Int64?
    public var receivedAt: Timestamp?
    /// Where it came from: `ingest` (POSTed by Apple) or `history` (fetched by a backfill); the record's `source` header.
    public var source: String?
    /// Re-driven from a dead letter (the record has a `redriven-from` header): a delivery, but not Apple's.
    public var redriven = false
    /// The JWS taken apart for the archive (certificate chains once, payloads as JSON text), or nil when it does not
    /// rebuild exactly and is archived raw. Given by the worker (taken apart in its parallel verify tasks: `archived:`
    /// `.some(nil)` means "tried, archive it raw"), else computed here.
    public var archived: ArchivedJWS?
    /// The W3C `traceparent` of the worker's span for this record, when tracing is on: its events' outbox rows keep it
    /// (the relay and the webhooks service continue the trace) and its delivery and archive rows keep its trace id.
    public var traceparent: String?

    public init(
        verified: VerifiedNotification, signedPayload: String, kafkaTopic: String? = nil, kafkaPartition: Int32? = nil, kafkaOffset: Int64? = nil,
        receivedAt: Timestamp? = nil, source: String? = nil, archived: ArchivedJWS?? = nil
    ) {
        self.init(
            verified: verified, signedPayloadBytes: Array(signedPayload.utf8), kafkaTopic: kafkaTopic, kafkaPartition: kafkaPartition,
            kafkaOffset: kafkaOffset, receivedAt: receivedAt, source: source, archived: archived)
    }

    public init(
        verified: VerifiedNotification, signedPayloadBytes: [UInt8], kafkaTopic: String? = nil, kafkaPartition: Int32? = nil, kafkaOffset: Int64? = nil,
        receivedAt: Timestamp? = nil, source: String? = nil, archived: ArchivedJWS?? = nil
    ) {
        self.verified = verified
        self.signedPayloadBytes = signedPayloadBytes
        self.kafkaTopic = kafkaTopic
        self.kafkaPartition = kafkaPartition
        self.kafkaOffset = kafkaOffset
        self.receivedAt = receivedAt
        self.source = source
        self.archived = archived ?? ArchivedJWS.decompose(signedPayloadBytes)
    }

    /// Where the record was read, when it was read from a topic.
    public var position: RecordPosition? {
        guard let kafkaTopic, let kafkaPartition, let kafkaOffset else { return nil }
        return RecordPosition(topic: kafkaTopic, partition: kafkaPartition, offset: kafkaOffset)
    }

    /// The trace id of `traceparent`.
    public var traceId: String? { traceparent.flatMap(TraceParent.traceId) }

    /// The routing key (`RoutingKey`: the Kafka key, the key a distributed database shards by); the dedupe key for
    /// a payload that has none (it cannot verify without a notificationUUID or a transaction, but the column is
    /// never empty).
    public var routingKey: String { verified.routingKey ?? deduplicationKey }

    /// The dedupe key: Apple's notificationUUID (resent unchanged on retries).
    public var deduplicationKey: String {
        verified.payload.notificationUUID ?? "payload:" + Hex.encode(signedPayloadBytes.suffix(86))
    }
}

/// A Kafka record header as the store keeps it (the store does not link the Kafka client).
public struct StoredHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }
}

/// A record of the batch that was dead-lettered: where it was read, and why.
public struct DeadLetteredRecord: Sendable, Hashable {
    public var position: RecordPosition
    public var errorCode: String
    /// The verifier's reason, the identifiers the payload claims (unverified) and the payload itself (at most
    /// `DeadLetteredRecord.payloadLimit` bytes), for the console's dead letters and timelines.
    public var reason: String?
    public var claims = UnverifiedClaims()
    public var payload: String?
    public var receivedAt: Timestamp?
    /// Re-driven from an earlier dead letter: not one of Apple's deliveries.
    public var redriven = false
    /// The worker's span of the record (W3C `traceparent`), when tracing is on: a re-drive continues it.
    public var traceparent: String?
    /// Its trace id.
    public var traceId: String? { traceparent.flatMap(TraceParent.traceId) }
    /// Where the dead letter itself was acknowledged on the dead-letter topic, and its headers as produced (values
    /// as bytes), so the console re-drives it exactly as `pipelinectl dlq redrive` re-drives the topic's record.
    public var deadLetterPosition: RecordPosition?
    public var deadLetterHeaders: [StoredHeader] = []

    /// Its row for `dead_lettered_records` (jsonb refuses U+0000, which attacker text may hold: dropped).
    var row: JSONValue {
        func text(_ value: String?) -> JSONValue { value.map { .string($0.replacingOccurrences(of: "\u{0}", with: "")) } ?? .null }
        return .object(JSONObject([
            "t": .string(position.topic), "p": .number(JSONNumber(Int64(position.partition))), "o": .number(JSONNumber(position.offset)),
            "c": text(errorCode), "r": text(reason), "u": text(claims.notificationUUID), "nt": text(claims.notificationType), "b": text(claims.bundleId),
            "ot": text(claims.originalTransactionId), "ra": receivedAt.map { .number(JSONNumber($0.millisecondsSince1970)) } ?? .null, "pl": text(payload),
            "rd": .bool(redriven), "ti": text(traceId), "tp": text(traceparent),
            "dt": text(deadLetterPosition?.topic), "dp": deadLetterPosition.map { .number(JSONNumber(Int64($0.partition))) } ?? .null,
            "do": deadLetterPosition.map { .number(JSONNumber($0.offset)) } ?? .null,
            "dh": deadLetterHeaders.isEmpty ? .null : .array(deadLetterHeaders.map { header in
                .object(JSONObject(["k": .string(header.key), "v": header.value.map { .string(Base64.encode($0, alphabet: .standard)) } ?? .null]))
            }),
        ]))
    }

    /// What the dead letter claims, for the erasure screen: every identifier its payload names, whatever its
    /// kind, held back by any erasure of them (no time: a record that did not verify proves no date).
    public var erasureClaim: ErasureClaim? {
        guard let payload else { return nil }
        let bytes = Array(payload.utf8)
        let claim = ErasureClaim.of(record: bytes, kind: nil)
            ?? [PulledRecordKind.statusSnapshot, .purchase, .historyTransaction].lazy.compactMap { ErasureClaim.of(record: bytes, kind: $0) }.first
        guard var claim else {
            return claims.bundleId.map { bundleId in
                ErasureClaim(
                    bundleId: bundleId, identifiers: claims.originalTransactionId.map { [ErasedIdentifier(.originalTransactionId, bundleId: bundleId, value: $0)] } ?? [],
                    time: nil)
            }
        }
        claim.time = nil
        return claim
    }

    /// Larger payloads are kept up to here (ingest refuses bodies over 1 MiB; Apple's are under 20 KB).
    public static let payloadLimit = 65_536

    public init(position: RecordPosition, errorCode: String, reason: String? = nil, payload: [UInt8] = [], receivedAt: Timestamp? = nil) {
        self.position = position
        self.errorCode = errorCode
        self.reason = reason
        self.receivedAt = receivedAt
        if !payload.isEmpty {
            let text = String(decoding: payload.prefix(Self.payloadLimit), as: UTF8.self)
            self.payload = text
            claims = UnverifiedPeek.claims(ofNotification: text)
        }
    }
}

/// What one batch did.
public struct BatchOutcome: Sendable, Hashable {
    /// Notifications seen for the first time, archived and applied.
    public var applied = 0
    /// Notifications already in the ledger (or twice in the batch): acknowledged, not applied again.
    public var duplicates = 0
    /// Entitlement rows written.
    public var entitlementsUpdated = 0
    /// Notifications older than the row they concern: archived, but state kept.
    public var stale = 0
    /// Entitlement events written to the outbox.
    public var events = 0
    /// Purchases linked to the offer signature they redeemed (docs/offers.md).
    public var offersRedeemed = 0
    /// Purchases posted through the customer API whose ownership was decided.
    public var purchases = 0
    /// Records about an erased customer from before the erasure: acknowledged, not stored (by cause kind:
    /// notification, statusSnapshot, historyTransaction, purchase).
    public var suppressed: [String: Int] = [:]
    /// Their dedupe keys, for their spans' outcome.
    public var suppressedKeys: Set<String> = []
    /// Which records were not applied, for their spans' outcome: duplicates (by position; a record without one is
    /// not listed) and new notifications that changed nothing (by dedupe key). The rest were applied.
    public var duplicatePositions: Set<RecordPosition> = []
    public var unchangedKeys: Set<String> = []

    /// Two outcomes are equal when their counts are (which records were not applied is detail for spans).
    public static func == (lhs: Self, rhs: Self) -> Bool {
        (lhs.applied, lhs.duplicates, lhs.entitlementsUpdated, lhs.stale, lhs.events, lhs.purchases)
            == (rhs.applied, rhs.duplicates, rhs.entitlementsUpdated, rhs.stale, rhs.events, rhs.purchases)
    }

    public func hash(into hasher: inout Hasher) {
        for count in [applied, duplicates, entitlementsUpdated, stale, events, purchases] { hasher.combine(count) }
    }

    public init(applied: Int = 0, duplicates: Int = 0, entitlementsUpdated: Int = 0, stale: Int = 0, events: Int = 0) {
        self.applied = applied
        self.duplicates = duplicates
        self.entitlementsUpdated = entitlementsUpdated
        self.stale = stale
        self.events = events
    }
}

/// PostgreSQL persistence of verified notifications: migrations, the dedupe ledger, the archive, transactions and
/// entitlements. Every batch is one database transaction, so a batch is either entirely durable (and its Kafka
/// offsets may move) or not at all (and it is redelivered).
public struct EntitlementStore: Sendable {
    public let client: PostgresClient
    public let logger: Logger
    /// Set as `statement_timeout`, `lock_timeout` and `idle_in_transaction_session_timeout` of every batch
    /// transaction: just under the caller's own deadline, so an abandoned transaction ends on the server too.
    public let statementTimeout: Duration?
    /// Whether batches write entitlement-change events to the outbox (`EVENTS_ENABLED`).
    public let emitsEvents: Bool
    /// The key of the erasure suppression list (`ERASURE_KEY_FILE`): every batch checks its records against it.
    /// Without one, a batch is refused (and retried) as soon as the list has entries (`ErasureFailure.keyMissing`).
    public let erasureKey: ErasureKey?
    /// Whether a RESCIND_CONSENT queues the erasure of what its app transaction links to (`CONSENT_RESCINDED_ERASES`).
    public let consentRescindedErases: Bool
    /// The notification tables' monthly partitions this store has seen exist (`TimePartitions`).
    public let partitions = TimePartitions()

    /// `client` must be running (its `run()` inside the process's ServiceGroup) before the first call.
    public init(
        client: PostgresClient, logger: Logger, statementTimeout: Duration? = nil, emitsEvents: Bool = true, erasureKey: ErasureKey? = nil,
        consentRescindedErases: Bool = false
    ) {
        self.client = client
        self.logger = logger
        self.statementTimeout = statementTimeout
        self.emitsEvents = emitsEvents
        self.erasureKey = erasureKey
        self.consentRescindedErases = consentRescindedErases
    }

    /// Applies every migration not applied yet (up to `through`, when given), under an advisory lock. Returns the
    /// versions it applied.
    @discardableResult
    public func migrate(through: Int? = nil) async throws -> [Int] {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Migrations.lockKey))", logger: logger)
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
                logger: logger)
            var applied: Set<Int> = []
            for try await version in try await connection.query("SELECT version FROM schema_migrations", logger: logger).decode(Int.self) {
                applied.insert(version)
            }
            var newlyApplied: [Int] = []
            for migration in Migrations.all where !applied.contains(migration.version) && migration.version <= (through ?? Int.max) {
                for statement in migration.sql {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO schema_migrations (version, name) VALUES (\(migration.version), \(migration.name))", logger: logger)
                newlyApplied.append(migration.version)
            }
            return newlyApplied
        }
    }

    /// Stores a batch in one transaction: dedupe, archive, transactions, entitlements (forward only).
    /// Order matters for entitlements: give the records of each partition in offset order.
    ///
    /// Four multi-row statements whatever the batch size (plus one to lock the entitlement rows it touches): each
    /// takes its rows as one bound parameter, a JSON array unpacked by `jsonb_to_recordset`, so no SQL is ever
    /// built from data and a batch of 500 costs as many round trips as a batch of 1.
    ///
    /// `deadLettered` are the batch's records that were dead-lettered (and acknowledged by the broker): their
    /// positions are recorded in the same transaction, so a redelivery of the batch publishes them no more
    /// (`deadLetteredPositions(among:)`).
    public func store(_ batch: [StoredNotification], deadLettered: [DeadLetteredRecord] = []) async throws -> BatchOutcome {
        guard !batch.isEmpty || !deadLettered.isEmpty else { return BatchOutcome() }
        try await ensurePartitions(for: batch)
        do {
            return try await storeInTransaction(batch, deadLettered: deadLettered)
        } catch where TimePartitions.isMissingPartition(error) {
            // A month this process had seen was dropped since (retention): create it again, once.
            partitions.forget()
            try await ensurePartitions(for: batch)
            return try await storeInTransaction(batch, deadLettered: deadLettered)
        }
    }

    func storeInTransaction(_ batch: [StoredNotification], deadLettered: [DeadLetteredRecord]) async throws -> BatchOutcome {
        try await ErasureFailure.unwrapped {
            try await client.withTransaction(logger: logger) { connection in
                try await write(batch, deadLettered: deadLettered, on: connection)
            }
        }
    }

    /// Runs the batch's statements in a transaction that is always rolled back: whether PostgreSQL accepts these
    /// records, without storing them (a worker isolates a record the database refuses for good this way).
    public func probe(_ batch: [StoredNotification]) async throws {
        struct RolledBack: Error {}
        try await ensurePartitions(for: batch)
        do {
            try await client.withTransaction(logger: logger) { connection in
                _ = try await write(batch, deadLettered: [], on: connection)
                throw RolledBack()
            }
        } catch is RolledBack {
            return
        }
    }

    /// The months the batch's notifications were signed in have their partitions (`TimePartitions`), and so has
    /// today in the outbox (its rows are filed by when the transaction wrote them; one that starts after midnight
    /// finds no partition and is retried once after this made it).
    func ensurePartitions(for batch: [StoredNotification]) async throws {
        try await partitions.ensure(monthsOf: batch.map(\.verified.signedDate.millisecondsSince1970), client: client, logger: logger)
        try await partitions.ensure(
            tables: [TimePartitions.outboxTable], period: .day, instants: [Int64(Date().timeIntervalSince1970 * 1000)], client: client, logger: logger)
    }

    /// Bounds every statement of a transaction (`SET LOCAL`): a client that gave up at its deadline must not
    /// leave the server running the abandoned transaction.
    func applyTimeouts(on connection: PostgresConnection) async throws {
        try await StatementTimeouts.apply(statementTimeout, on: connection, logger: logger)
    }

    /// The batch's one transaction, in four steps that read top to bottom: the dead letters' positions, the dedupe
    /// ledger (what is new), the archive and transactions, the entitlements with their events, the outbox.
    func write(_ batch: [StoredNotification], deadLettered: [DeadLetteredRecord], on connection: PostgresConnection) async throws -> BatchOutcome {
        try await applyTimeouts(on: connection)
        var outcome = BatchOutcome()
        // The erasure lock shared, first: an erasure is wholly before this transaction (its suppression entries are
        // seen by both checks below) or wholly after it (it erases what this writes).
        try await connection.query("SELECT pg_advisory_xact_lock_shared(\(ErasureStore.lockKey))", logger: logger)
        try await recordDeadLetters(try await withoutErasedClaims(deadLettered, on: connection), on: connection)
        guard !batch.isEmpty else { return outcome }
        let batch = try await withoutErased(batch, outcome: &outcome, on: connection)
        guard !batch.isEmpty else { return outcome }
        try await recordDeliveries(batch, on: connection)
        let firstSeen = try await claimInLedger(batch, outcome: &outcome, on: connection)
        guard !firstSeen.isEmpty else { return outcome }
        // Per transaction, its newest version in the batch: what is written and what a redemption is linked from.
        let transactions = Self.newestTransactions(firstSeen)
        let knownOneTime = try await storeArchiveAndTransactions(firstSeen, transactions: transactions, on: connection)
        try await queueConsentErasures(firstSeen, on: connection)
        try await recordExtensionSummaries(firstSeen, on: connection)
        var events = try await applyEntitlements(firstSeen, knownOneTime: knownOneTime, outcome: &outcome, on: connection)
        events += try await linkOfferRedemptions(firstSeen, transactions: transactions, outcome: &outcome, on: connection)
        if !events.isEmpty {
            var traceparents: [String: String] = [:]
            for record in firstSeen { if let traceparent = record.traceparent { traceparents[record.deduplicationKey] = traceparent } }
            try await connection.query(Self.outboxStatement(events, traceparents: traceparents), logger: logger)
            outcome.events = events.count
        }
        return outcome
    }

    /// The positions of the records dead-lettered with this batch, so a re-read skips them.
    func recordDeadLetters(_ deadLettered: [DeadLetteredRecord], on connection: PostgresConnection) async throws {
        guard !deadLettered.isEmpty else { return }
        let ordered = deadLettered.sorted { $0.position < $1.position }
        try await connection.query(
            """
            INSERT INTO dead_lettered_records (original_topic, original_partition, original_offset, error_code, reason, notification_uuid,
                notification_type, bundle_id, original_transaction_id, received_at, payload, redriven, trace_id, traceparent,
                dead_letter_topic, dead_letter_partition, dead_letter_offset, dead_letter_headers)
            SELECT d.t, d.p, d.o, d.c, d.r, d.u, d.nt, d.b, d.ot, to_timestamp(d.ra / 1000.0), d.pl, d.rd, d.ti, d.tp, d.dt, d.dp, d."do", d.dh
            FROM jsonb_to_recordset(\(JSONValue.array(ordered.map(\.row)).serialized)::jsonb)
                AS d(t text, p integer, o bigint, c text, r text, u text, nt text, b text, ot text, ra bigint, pl text, rd boolean, ti text, tp text,
                     dt text, dp integer, "do" bigint, dh jsonb)
            ORDER BY d.t, d.p, d.o
            ON CONFLICT DO NOTHING
            """,
            logger: logger)
    }

    /// Every record of the batch is a delivery of its notification (duplicates too), keyed by its position: a
    /// redelivered batch or a replay counts nothing twice. What the console's `deliveries` counts.
    func recordDeliveries(_ batch: [StoredNotification], on connection: PostgresConnection) async throws {
        let rows: [JSONValue] = batch.compactMap { record in
            guard let topic = record.kafkaTopic, let partition = record.kafkaPartition, let offset = record.kafkaOffset else { return nil }
            return .object(JSONObject([
                "t": .string(topic), "p": .number(JSONNumber(Int64(partition))), "o": .number(JSONNumber(offset)), "u": .string(record.deduplicationKey),
                "k": .string(record.routingKey), "sd": .number(JSONNumber(record.verified.signedDate.millisecondsSince1970)),
                "s": record.source.map(JSONValue.string) ?? .null, "r": record.receivedAt.map { .number(JSONNumber($0.millisecondsSince1970)) } ?? .null,
                "d": .bool(record.redriven), "ti": record.traceId.map(JSONValue.string) ?? .null,
            ]))
        }
        guard !rows.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO notification_deliveries (kafka_topic, kafka_partition, kafka_offset, notification_uuid, routing_key, signed_date, source,
                redriven, received_at, trace_id)
            SELECT d.t, d.p, d.o, d.u, d.k, to_timestamp(d.sd / 1000.0), d.s, d.d, to_timestamp(d.r / 1000.0), d.ti
            FROM jsonb_to_recordset(\(JSONValue.array(rows).serialized)::jsonb)
                AS d(t text, p integer, o bigint, u text, k text, sd bigint, s text, d boolean, r bigint, ti text)
            WHERE NOT EXISTS (SELECT 1 FROM notification_deliveries x WHERE x.kafka_topic = d.t AND x.kafka_partition = d.p
                AND x.kafka_offset = d.o AND x.signed_date = to_timestamp(d.sd / 1000.0))
            ORDER BY d.t, d.p, d.o
            ON CONFLICT DO NOTHING
            """,
            logger: logger)
    }

    /// Dedupe ledger: one multi-row insert; what comes back is new. Another worker inserting the same key waits here
    /// for our commit, so a notification is applied by exactly one transaction. Keys go in sorted (byte) order, the
    /// same in every worker, so two batches that overlap during a partition handoff wait on each other instead of
    /// deadlocking. Returns each new key's first occurrence, in batch order (a key is applied once, never again).
    func claimInLedger(_ batch: [StoredNotification], outcome: inout BatchOutcome, on connection: PostgresConnection) async throws -> [StoredNotification] {
        var claims: [String: StoredNotification] = [:]
        for record in batch where claims[record.deduplicationKey] == nil { claims[record.deduplicationKey] = record }
        let keys = claims.keys.sorted(by: String.precedesInByteOrder)
        let routingKeys = keys.map { claims[$0]!.routingKey }
        let signedDates = keys.map { claims[$0]!.verified.signedDate.millisecondsSince1970 }
        var fresh: Set<String> = []
        // The key is (uuid, routing key, signedDate); the NOT EXISTS also finds a row of an earlier version whose
        // routing key was derived differently, in the one partition of its signedDate, or whose signedDate is
        // unknown (`notification_ledger_undated`, Migrations.partitions).
        let inserted = try await connection.query(
            """
            INSERT INTO notification_ledger (notification_uuid, routing_key, signed_date)
            SELECT u.k, u.r, to_timestamp(u.s / 1000.0)
            FROM unnest(\(keys)::text[], \(routingKeys)::text[], \(signedDates)::bigint[]) WITH ORDINALITY AS u(k, r, s, position)
            WHERE NOT EXISTS (SELECT 1 FROM notification_ledger l WHERE l.notification_uuid = u.k AND l.signed_date = to_timestamp(u.s / 1000.0))
                AND NOT EXISTS (SELECT 1 FROM notification_ledger_undated x WHERE x.notification_uuid = u.k)
            ORDER BY u.position
            ON CONFLICT DO NOTHING RETURNING notification_uuid
            """,
            logger: logger)
        for try await key in inserted.decode(String.self) { fresh.insert(key) }
        var firstSeen: [StoredNotification] = []
        for record in batch {
            if fresh.remove(record.deduplicationKey) != nil {
                firstSeen.append(record)
            } else {
                outcome.duplicates += 1
                if let position = record.position { outcome.duplicatePositions.insert(position) }
            }
        }
        outcome.applied = firstSeen.count
        return firstSeen
    }

    /// The archive, consumption requests, transactions and grace periods of the new records. Returns the one-time
    /// transactions already stored before this batch (a one-time purchase is one event, whichever of its records
    /// comes first: a purchase posted through the customer API, then Apple's ONE_TIME_CHARGE).
    func storeArchiveAndTransactions(
        _ firstSeen: [StoredNotification], transactions newest: [(VerifiedPayload<JWSTransactionDecodedPayload>, VerifiedNotification)],
        on connection: PostgresConnection
    ) async throws -> Set<String> {
        try await Self.archive(firstSeen, on: connection, logger: logger)
        // A CONSUMPTION_REQUEST asks for an answer within 12 hours of its signedDate: recorded as pending here, in
        // the same transaction, so none is lost; `pipelinectl consumption` lists and answers them.
        let consumption = firstSeen.compactMap(Self.consumptionRow)
        if !consumption.isEmpty {
            try await connection.query(
                """
                INSERT INTO consumption_requests (notification_uuid, routing_key, environment, bundle_id, transaction_id, original_transaction_id, product_type,
                    reason, requested_at, deadline)
                SELECT r.notification_uuid, r.routing_key, r.environment, r.bundle_id, r.transaction_id, r.original_transaction_id, r.product_type, r.reason,
                    to_timestamp(r.requested_at / 1000.0), to_timestamp(r.requested_at / 1000.0) + interval '12 hours'
                FROM jsonb_to_recordset(\(JSONValue.array(consumption).serialized)::jsonb) AS r(notification_uuid text, routing_key text, environment text,
                    bundle_id text, transaction_id text, original_transaction_id text, product_type text, reason text, requested_at bigint)
                ORDER BY r.notification_uuid
                ON CONFLICT DO NOTHING
                """,
                logger: logger)
        }
        // Read before this batch's transactions are written.
        let knownOneTime = emitsEvents ? try await storedTransactionIds(Self.oneTimeTransactionIds(firstSeen), on: connection) : []
        let transactions = newest.sorted { String.precedesInByteOrder($0.0.model.transactionId ?? "", $1.0.model.transactionId ?? "") }
        if !transactions.isEmpty {
            try await connection.query(Self.transactionStatement(rows: JSONValue.array(transactions.map(Self.transactionRow)).serialized), logger: logger)
        }

        // The grace period Apple granted a period only grows (metrics read it as part of the period's access).
        let graces = Self.graceRows(firstSeen)
        if !graces.isEmpty {
            try await connection.query(
                """
                INSERT INTO transaction_grace (transaction_id, original_transaction_id, grace_period_expires_at)
                SELECT r.transaction_id, r.original_transaction_id, to_timestamp(r.grace / 1000.0)
                FROM jsonb_to_recordset(\(JSONValue.array(graces).serialized)::jsonb) AS r(transaction_id text, original_transaction_id text, grace bigint)
                ON CONFLICT (transaction_id, original_transaction_id) DO UPDATE SET grace_period_expires_at = GREATEST(transaction_grace.grace_period_expires_at,
                    EXCLUDED.grace_period_expires_at)
                """,
                logger: logger)
        }
        return knownOneTime
    }

    /// What the entitlements step changes while it applies a batch: the locked rows as they now stand, the keys
    /// changed (in first-change order), and the events. With events, each real change of a row becomes one event,
    /// numbered in its subscription's sequence.
    struct EntitlementChanges {
        var current: [EntitlementKey: LockedRow]
        let emitsEvents: Bool
        var changed: [EntitlementKey] = []
        var changedSet: Set<EntitlementKey> = []
        var events: [EntitlementEvent] = []
        /// Rows whose event_sequence moved without a state change (a transfer of a row the batch did not change).
        var sequenceOnly: Set<EntitlementKey> = []
        /// The new notifications that changed nothing (the row was already past them or equal), by deduplication key.
        var unchanged: [String] = []

        mutating func record(_ state: EntitlementState, at key: EntitlementKey, cause: @autoclosure () -> EntitlementEventCause) {
            if changedSet.insert(key).inserted { changed.append(key) }
            var row = current[key] ?? LockedRow(state: state)
            row.state = state
            if emitsEvents, let event = EntitlementEvent.change(of: state, before: row.lastEventAfter, sequence: row.eventSequence + 1, cause: cause()) {
                row.eventSequence += 1
                row.lastEventAfter = EntitlementSnapshot(state, at: event.time)
                events.append(event)
            }
            current[key] = row
        }

        /// A purchase bound or moved to a customer: an `entitlement.transferred` event in the subscription's sequence.
        mutating func recordTransfer(
            _ applied: AppliedClaim, of claim: PurchaseClaim, transaction: JWSTransactionDecodedPayload, at key: EntitlementKey, cause: EntitlementEventCause
        ) {
            var row = current[key]
            let sequence = row.map { $0.eventSequence + 1 }
            let snapshot = row.map { $0.lastEventAfter ?? EntitlementSnapshot($0.state, at: cause.signedDate) }
            events.append(EntitlementEvent.transfer(
                environment: key.environment, bundleId: key.bundleId, originalTransactionId: key.originalTransactionId,
                productId: row?.state.productId ?? transaction.productId, appAccountToken: row?.state.appAccountToken ?? transaction.appAccountToken,
                appTransactionId: row?.state.appTransactionId ?? transaction.appTransactionId, from: applied.previousOwner, to: claim.customerId,
                sequence: sequence, snapshot: snapshot, cause: cause))
            if let sequence {
                row?.eventSequence = sequence
                row?.lastEventAfter = snapshot
                current[key] = row
                if !changedSet.contains(key) { sequenceOnly.insert(key) }
            }
        }
    }

    /// Locks the rows the batch touches, applies every notification in order (the one state machine), decides the
    /// owner of every posted purchase, and writes each final state. Returns the events, in the order they happened.
    func applyEntitlements(
        _ firstSeen: [StoredNotification], knownOneTime: Set<String>, outcome: inout BatchOutcome, on connection: PostgresConnection
    ) async throws -> [EntitlementEvent] {
        let touched = Set(firstSeen.flatMap(\.entitlementKeys))
        if emitsEvents { try await lockSubscriptions(touched, on: connection) }
        var changes = EntitlementChanges(current: try await lockedEntitlements(touched, on: connection), emitsEvents: emitsEvents)
        var oneTimeSeen = knownOneTime
        for notification in firstSeen {
            let cause = EntitlementEventCause(notification.verified, key: notification.deduplicationKey)
            if emitsEvents, let event = EntitlementEvent.ofNotification(notification.verified, cause: cause) {
                if event.type != .oneTimePurchase || oneTimeSeen.insert(notification.verified.transactionInfo?.model.transactionId ?? event.id).inserted {
                    changes.events.append(event)
                }
            }
            guard let key = notification.entitlementKey else { continue }
            let tokenBefore = changes.current[key]?.state.appAccountToken
            switch EntitlementTransition.apply(notification.verified, to: changes.current[key]?.state) {
            case .updated(let state):
                changes.record(state, at: key, cause: cause)
                outcome.entitlementsUpdated += 1
                // A switch to or from a bundle: the previous subscription's row stops granting access.
                if let previous = state.previousOriginalTransactionId, previous != key.originalTransactionId {
                    let previousKey = EntitlementKey(environment: key.environment, bundleId: key.bundleId, originalTransactionId: previous)
                    if let superseded = EntitlementTransition.supersede(changes.current[previousKey]?.state, originalTransactionId: previous, by: state) {
                        changes.record(superseded, at: previousKey, cause: cause)
                    }
                }
            case .stale:
                outcome.stale += 1
                changes.unchanged.append(notification.deduplicationKey)
            case .notApplicable:
                break
            }
            // A purchase posted through the customer API: who owns it now, decided in this transaction.
            if let claim = notification.verified.purchase, let transaction = notification.verified.transactionInfo?.model {
                let applied = try await applyClaim(
                    claim, purchaseKey: notification.deduplicationKey, transaction: transaction, key: key, rowToken: tokenBefore, on: connection)
                outcome.purchases += 1
                if emitsEvents, applied.decision == .bound || applied.decision == .transferred {
                    changes.recordTransfer(applied, of: claim, transaction: transaction, at: key, cause: cause)
                }
            }
        }
        try await writeEntitlements(changes, on: connection)
        try await recordUnchanged(changes.unchanged, on: connection)
        outcome.unchangedKeys = Set(changes.unchanged)
        return changes.events
    }

    /// The new notifications that changed nothing are marked `unchanged` in the ledger, in the transaction that
    /// decided it; the others keep outcome NULL, which means applied (most batches write nothing here). The
    /// console's timeline reads it.
    func recordUnchanged(_ keys: [String], on connection: PostgresConnection) async throws {
        guard !keys.isEmpty else { return }
        try await connection.query(
            "UPDATE notification_ledger SET outcome = 'unchanged' WHERE notification_uuid = ANY(\(keys.sorted(by: String.precedesInByteOrder))::text[])",
            logger: logger)
    }

    /// Each changed row's final state, in key order (the order the rows were locked in: no deadlock between two
    /// workers' inserts); then the sequence of rows only a transfer moved.
    func writeEntitlements(_ changes: EntitlementChanges, on connection: PostgresConnection) async throws {
        let rows = try changes.changed.sorted(by: EntitlementKey.lockOrder).compactMap { key in try changes.current[key].map(Self.entitlementRow) }
        if !rows.isEmpty {
            try await connection.query(Self.entitlementStatement(rows), logger: logger)
        }
        for key in changes.sequenceOnly.sorted(by: EntitlementKey.lockOrder) where !changes.changedSet.contains(key) {
            guard let row = changes.current[key] else { continue }
            let after = row.lastEventAfter.map { JSONValue.object($0.json).serialized }
            try await connection.query(
                """
                UPDATE entitlements SET event_sequence = \(row.eventSequence), last_event_after = \(after)::jsonb
                WHERE environment = \(key.environment) AND bundle_id = \(key.bundleId) AND original_transaction_id = \(key.originalTransactionId)
                """,
                logger: logger)
        }
    }

    /// A locked entitlement row: its state, and the sequence and `after` of its last event.
    struct LockedRow {
        var state: EntitlementState
        var eventSequence: Int64 = 0
        var lastEventAfter: EntitlementSnapshot?
    }

    struct EntitlementKey: Hashable {
        var environment: String
        var bundleId: String
        var originalTransactionId: String

        /// Byte order, as PostgreSQL's `COLLATE "C"` sorts: every worker locks and inserts rows in this order.
        static func lockOrder(_ a: EntitlementKey, _ b: EntitlementKey) -> Bool {
            for (x, y) in [(a.environment, b.environment), (a.bundleId, b.bundleId), (a.originalTransactionId, b.originalTransactionId)] where x != y {
                return String.precedesInByteOrder(x, y)
            }
            return false
        }
    }

    /// Serialises every transaction that may change one of `keys`, including a subscription's first row (which
    /// `FOR UPDATE` cannot lock before it exists): a transaction-scoped advisory lock per key, taken in the order
    /// of the lock ids (the same in every worker, so two batches cannot deadlock). Without it, two workers meeting
    /// a new subscription during a partition handoff could both number its first event 1.
    func lockSubscriptions(_ keys: Set<EntitlementKey>, on connection: PostgresConnection) async throws {
        guard !keys.isEmpty else { return }
        let ids = Set(keys.map(\.advisoryLockId)).sorted()
        try await connection.query(
            """
            SELECT count(pg_advisory_xact_lock(\(Self.subscriptionLockNamespace), u.id))
            FROM unnest(\(ids)::integer[]) WITH ORDINALITY AS u(id, position)
            """,
            logger: logger)
    }

    /// The first key of the two-key advisory locks on subscriptions ("ents" in ASCII).
    static let subscriptionLockNamespace: Int32 = 0x656E_7473

    /// The current rows, locked until the transaction ends (so two workers never interleave on one subscription),
    /// in key order (so two transactions locking overlapping sets cannot deadlock).
    func lockedEntitlements(_ keys: Set<EntitlementKey>, on connection: PostgresConnection) async throws -> [EntitlementKey: LockedRow] {
        guard !keys.isEmpty else { return [:] }
        let ordered = keys.sorted(by: EntitlementKey.lockOrder)
        let rows = try await connection.query(
            """
            SELECT e.state::text, e.event_sequence, e.last_event_after::text FROM entitlements e
            JOIN unnest(\(ordered.map(\.environment))::text[], \(ordered.map(\.bundleId))::text[], \(ordered.map(\.originalTransactionId))::text[])
                AS k(environment, bundle_id, original_transaction_id) USING (environment, bundle_id, original_transaction_id)
            ORDER BY e.environment COLLATE "C", e.bundle_id COLLATE "C", e.original_transaction_id COLLATE "C"
            FOR UPDATE OF e
            """,
            logger: logger)
        var states: [EntitlementKey: LockedRow] = [:]
        for try await (text, sequence, after) in rows.decode((String, Int64?, String?).self) {
            let state = try JSONDecoder().decode(EntitlementState.self, from: Data(text.utf8))
            let lastAfter = after.flatMap { try? StrictJSONParser().parseObject(Array($0.utf8)) }.flatMap { try? JSONValueDecoder().decode(EntitlementSnapshot.self, from: .object($0)) }
            states[EntitlementKey(environment: state.environment, bundleId: state.bundleId, originalTransactionId: state.originalTransactionId)] =
                LockedRow(state: state, eventSequence: sequence ?? 0, lastEventAfter: lastAfter)
        }
        return states
    }

    /// The transaction ids of the batch's one-time purchases (not auto-renewable subscriptions).
    static func oneTimeTransactionIds(_ records: [StoredNotification]) -> [String] {
        records.compactMap { record in
            guard let transaction = record.verified.transactionInfo?.model, transaction.rawType != nil, transaction.type != .autoRenewableSubscription
            else { return nil }
            return transaction.transactionId
        }
    }

    /// Which of `ids` the `transactions` table already holds.
    func storedTransactionIds(_ ids: [String], on connection: PostgresConnection) async throws -> Set<String> {
        guard !ids.isEmpty else { return [] }
        var known: Set<String> = []
        let rows = try await connection.query("SELECT transaction_id FROM transactions WHERE transaction_id = ANY(\(Array(Set(ids)).sorted())::text[])", logger: logger)
        for try await id in rows.decode(String.self) { known.insert(id) }
        return known
    }

    /// Per transactionId, the version with the latest signedDate (one row per key, as a multi-row upsert requires).
    static func newestTransactions(_ records: [StoredNotification]) -> [(VerifiedPayload<JWSTransactionDecodedPayload>, VerifiedNotification)] {
        var newest: [String: (VerifiedPayload<JWSTransactionDecodedPayload>, VerifiedNotification)] = [:]
        var order: [String] = []
        for record in records {
            guard let transaction = record.verified.transactionInfo, let id = transaction.model.transactionId, transaction.model.originalTransactionId != nil else { continue }
            if let existing = newest[id] {
                if existing.0.signedDate < transaction.signedDate { newest[id] = (transaction, record.verified) }
            } else {
                newest[id] = (transaction, record.verified)
                order.append(id)
            }
        }
        return order.compactMap { newest[$0] }
    }

    /// The periods of `records` that Apple's renewal info puts in a grace period (its end after the period's
    /// expiry), one row per transaction with the latest grace end (one statement may not touch a key twice).
    static func graceRows(_ records: [StoredNotification]) -> [JSONValue] {
        var latest: [String: (original: String, grace: Int64)] = [:]
        for record in records {
            guard let transaction = record.verified.transactionInfo?.model, let id = transaction.transactionId,
                let original = transaction.originalTransactionId, let expires = transaction.expiresDate?.millisecondsSince1970,
                let renewal = record.verified.renewalInfo?.model, renewal.originalTransactionId == transaction.originalTransactionId,
                let grace = renewal.gracePeriodExpiresDate?.millisecondsSince1970, grace > expires
            else { continue }
            latest[id] = (original, max(latest[id]?.grace ?? grace, grace))
        }
        return latest.sorted { String.precedesInByteOrder($0.key, $1.key) }.map { id, row in
            .object(JSONObject([
                "transaction_id": .string(id), "original_transaction_id": .string(row.original), "grace": .number(JSONNumber(row.grace)),
            ]))
        }
    }

    // MARK: - Rows and statements

    /// Timestamps travel as milliseconds (exact) and become timestamptz in SQL.
    static func millis(_ timestamp: Timestamp?) -> JSONValue { timestamp.map { .number(JSONNumber($0.millisecondsSince1970)) } ?? .null }
    static func text(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
    static func integer<I: BinaryInteger>(_ value: I?) -> JSONValue { value.map { .number(JSONNumber(Int64($0))) } ?? .null }

    static func consumptionRow(_ record: StoredNotification) -> JSONValue? {
        let verified = record.verified
        guard verified.payload.rawNotificationType == "CONSUMPTION_REQUEST", let transaction = verified.transactionInfo?.model,
            let transactionId = transaction.transactionId
        else { return nil }
        return .object(JSONObject([
            "notification_uuid": .string(record.deduplicationKey), "routing_key": .string(record.routingKey),
            "environment": .string(verified.environment.rawValue), "bundle_id": .string(verified.bundleId), "transaction_id": .string(transactionId), "original_transaction_id": text(transaction.originalTransactionId), "product_type": text(transaction.rawType),
            "reason": text(verified.payload.data?.rawConsumptionRequestReason), "requested_at": millis(verified.signedDate),
        ]))
    }

    static func archiveRow(_ record: StoredNotification) -> JSONValue {
        let verified = record.verified
        return .object(JSONObject([
            "notification_uuid": .string(record.deduplicationKey),
            "routing_key": .string(record.routingKey),
            "notification_type": .string(verified.payload.rawNotificationType ?? ""),
            "subtype": text(verified.payload.rawSubtype),
            "signed_date": millis(verified.signedDate),
            "environment": .string(verified.environment.rawValue),
            "bundle_id": .string(verified.bundleId),
            "original_transaction_id": text(verified.transactionInfo?.model.originalTransactionId),
            "kafka_topic": text(record.kafkaTopic),
            "kafka_partition": integer(record.kafkaPartition),
            "kafka_offset": integer(record.kafkaOffset),
            "received_at": millis(record.receivedAt),
            "source": text(record.source),
            "trace_id": text(record.traceId),
        ]))
    }

    /// Archives `records`: the header segments they reference first (once each, in digest order so that two
    /// workers never wait on each other in opposite orders), then one row per record, taken apart (ArchivedJWS) or,
    /// when it does not rebuild exactly, raw with its decoded payload as before.
    static func archive(_ records: [StoredNotification], on connection: PostgresConnection, logger: Logger) async throws {
        try await storeHeaders(of: records.compactMap(\.archived), on: connection, logger: logger)
        try await connection.query(
            archiveStatement(
                rows: JSONValue.array(records.map(archiveRow)).serialized,
                signedPayloads: records.map { $0.archived == nil ? $0.signedPayload : "" },
                payloads: records.map { $0.archived == nil ? JSONValue.object($0.verified.json).serialized : "" },
                headerDigests: records.map { $0.archived.map { Hex.encode($0.outer.headerDigest) } ?? "" },
                bodies: records.map { $0.archived?.outer.payload ?? "" },
                signatures: records.map { $0.archived?.outer.signature ?? "" },
                nested: records.map { NestedColumns($0.archived) }),
            logger: logger)
    }

    /// Stores the header segments `archived` reference, once each, in digest order (so that two workers never wait
    /// on each other in opposite orders); those already stored are left as they are.
    static func storeHeaders(of archived: [ArchivedJWS], on connection: PostgresConnection, logger: Logger) async throws {
        var headers: [[UInt8]: String] = [:]
        for each in archived { headers.merge(each.headers) { first, _ in first } }
        guard !headers.isEmpty else { return }
        let digests = headers.keys.sorted { $0.lexicographicallyPrecedes($1) }
        try await connection.query(
            """
            INSERT INTO jws_headers (sha256, segment)
            SELECT decode(d, 'hex'), s FROM unnest(\(digests.map { Hex.encode($0) })::text[], \(digests.map { headers[$0]! })::text[]) AS u(d, s)
            ON CONFLICT (sha256) DO NOTHING
            """,
            logger: logger)
    }

    /// A row's nested parts as three texts, one per archive column, each part's value joined by a separator that
    /// cannot occur in it: digests (hex) and signatures (base64url) by `,`, payloads (JSON text, which never holds a
    /// raw control character; `ArchivedJWS.decompose` refuses a nested payload that does) by U+0001. PostgreSQL
    /// splits them with `string_to_array`. (They travelled as one small JSON array per row before, which
    /// PostgreSQL parsed as jsonb once per column: a quarter of its time in the worker benchmark.)
    struct NestedColumns {
        var digests = ""
        var payloads = ""
        var signatures = ""

        static let payloadSeparator = "\u{1}"

        init(_ archived: ArchivedJWS?) {
            guard let nested = archived?.nested, !nested.isEmpty else { return }
            digests = nested.map { Hex.encode($0.headerDigest) }.joined(separator: ",")
            payloads = nested.map(\.payload).joined(separator: Self.payloadSeparator)
            signatures = nested.map(\.signature).joined(separator: ",")
        }

        /// The three archive columns from texts `digests`, `payloads` and `signatures` (SQL expressions), for a row
        /// taken apart (`header` not null); NULL for a row archived raw. No nested JWS: three empty arrays.
        static func columns(header: String, digests: String, payloads: String, signatures: String) -> String {
            """
            CASE WHEN \(header) IS NOT NULL THEN ARRAY(SELECT decode(x.h, 'hex') FROM unnest(string_to_array(\(digests), ',')) WITH ORDINALITY AS x(h, i) ORDER BY x.i) END,
            CASE WHEN \(header) IS NOT NULL THEN string_to_array(\(payloads), E'\\x01')::json[] END,
            CASE WHEN \(header) IS NOT NULL THEN string_to_array(\(signatures), ',') END
            """
        }
    }

    /// The archive's large columns (the raw JWS or the taken-apart bodies, the decoded payload) travel as arrays of
    /// their own, zipped with the JSON rows by `ROWS FROM`: inside the JSON document they would be escaped, parsed as
    /// part of it, and parsed a second time by `jsonb_to_recordset` (that alone was a third of a batch's time in
    /// PostgreSQL in the worker benchmark). The nested parts travel as `NestedColumns`. An empty string stands for
    /// "none" (no JWS, JSON text or digest is empty).
    static func archiveStatement(
        rows: String, signedPayloads: [String], payloads: [String], headerDigests: [String], bodies: [String], signatures: [String],
        nested: [NestedColumns]
    ) -> PostgresQuery {
        let nestedColumns = NestedColumns.columns(header: "r.header_sha256", digests: "f.nested_h", payloads: "f.nested_p", signatures: "f.nested_s")
        return """
        INSERT INTO notification_archive (notification_uuid, routing_key, notification_type, subtype, signed_date, environment, bundle_id,
            original_transaction_id, signed_payload, payload, kafka_topic, kafka_partition, kafka_offset, received_at, source,
            header_sha256, body, signature, nested_header_sha256, nested_bodies, nested_signatures, trace_id)
        SELECT r.notification_uuid, r.routing_key, r.notification_type, r.subtype, to_timestamp(r.signed_date / 1000.0), r.environment, r.bundle_id,
            r.original_transaction_id, r.signed_payload, r.payload::jsonb, r.kafka_topic, r.kafka_partition, r.kafka_offset,
            to_timestamp(r.received_at / 1000.0), r.source,
            decode(r.header_sha256, 'hex'), r.body::json, r.signature,
            \(unescaped: nestedColumns), r.trace_id
        FROM ROWS FROM (
            jsonb_to_recordset(\(rows)::jsonb) AS (notification_uuid text, routing_key text, notification_type text, subtype text, signed_date bigint,
                environment text, bundle_id text, original_transaction_id text, kafka_topic text, kafka_partition integer,
                kafka_offset bigint, received_at bigint, source text, trace_id text),
            unnest(\(signedPayloads)::text[]),
            unnest(\(payloads)::text[]),
            unnest(\(headerDigests)::text[]),
            unnest(\(bodies)::text[]),
            unnest(\(signatures)::text[]),
            unnest(\(nested.map(\.digests))::text[]),
            unnest(\(nested.map(\.payloads))::text[]),
            unnest(\(nested.map(\.signatures))::text[])
        ) AS f(notification_uuid, routing_key, notification_type, subtype, signed_date, environment, bundle_id, original_transaction_id,
            kafka_topic, kafka_partition, kafka_offset, received_at, source, trace_id, signed_payload, payload, header_sha256, body, signature,
            nested_h, nested_p, nested_s),
        LATERAL (SELECT f.notification_uuid, f.routing_key, f.notification_type, f.subtype, f.signed_date, f.environment, f.bundle_id,
            f.original_transaction_id, f.kafka_topic, f.kafka_partition, f.kafka_offset, f.received_at, f.source, f.trace_id,
            NULLIF(f.signed_payload, '') AS signed_payload, NULLIF(f.payload, '') AS payload, NULLIF(f.header_sha256, '') AS header_sha256,
            NULLIF(f.body, '') AS body, NULLIF(f.signature, '') AS signature) AS r
        ON CONFLICT DO NOTHING
        """
    }

    static func transactionRow(_ transaction: VerifiedPayload<JWSTransactionDecodedPayload>, of notification: VerifiedNotification) -> JSONValue {
        let t = transaction.model
        return .object(JSONObject([
            "transaction_id": text(t.transactionId),
            "original_transaction_id": text(t.originalTransactionId),
            "environment": .string(notification.environment.rawValue),
            "bundle_id": .string(notification.bundleId),
            "product_id": text(t.productId),
            "type": text(t.rawType),
            "purchase_date": millis(t.purchaseDate),
            "expires_date": millis(t.expiresDate),
            "quantity": integer(t.quantity),
            "revocation_date": millis(t.revocationDate),
            "revocation_reason": integer(t.rawRevocationReason),
            "revocation_type": text(t.rawRevocationType),
            "price": integer(t.price),
            "currency": text(t.currency),
            "app_account_token": text(t.appAccountToken),
            "ownership_type": text(t.rawInAppOwnershipType),
            "signed_date": millis(transaction.signedDate),
            "revocation_percentage": integer(t.revocationPercentage),
            "app_transaction_id": text(t.appTransactionId),
            "payload": .object(transaction.json),
        ]))
    }

    /// A transaction row moves forward only: a refund (newer signedDate) replaces the purchase, never the reverse.
    /// A purchase that redeemed a promotional or win-back offer is linked to the signature we issued for it
    /// (`offerRedemptionStatement`); each link is an `offer.redeemed` event when events are on.
    func linkOfferRedemptions(
        _ firstSeen: [StoredNotification], transactions: [(VerifiedPayload<JWSTransactionDecodedPayload>, VerifiedNotification)],
        outcome: inout BatchOutcome, on connection: PostgresConnection
    ) async throws -> [EntitlementEvent] {
        let rows = transactions.compactMap(Self.redemptionRow)
        guard !rows.isEmpty else { return [] }
        let linked = try await connection.query(Self.offerRedemptionStatement(rows: JSONValue.array(rows).serialized), logger: logger)
        var events: [EntitlementEvent] = []
        for try await (nonce, customerId, offer, transactionId, issuedAt) in linked.decode((String, String, String, String, Date).self) {
            outcome.offersRedeemed += 1
            guard emitsEvents, let (_, notification) = transactions.first(where: { $0.0.model.transactionId == transactionId }),
                let record = firstSeen.first(where: { $0.verified.transactionInfo?.model.transactionId == transactionId })
            else { continue }
            let cause = EntitlementEventCause(notification, key: record.deduplicationKey)
            if let event = EntitlementEvent.offerRedeemed(
                notification, cause: cause, nonce: nonce, offerIdentifier: offer, customerId: customerId, issuedAt: Timestamp(issuedAt))
            {
                events.append(event)
            }
        }
        return events
    }

    /// The transaction's offer, for `offerRedemptionStatement`: only promotional (2) and win-back (4) offers, the
    /// kinds a server signs.
    static func redemptionRow(_ transaction: VerifiedPayload<JWSTransactionDecodedPayload>, of notification: VerifiedNotification) -> JSONValue? {
        let t = transaction.model
        guard let type = t.rawOfferType, type == 2 || type == 4, let offer = t.offerIdentifier, let id = t.transactionId, let original = t.originalTransactionId else {
            return nil
        }
        return .object(JSONObject([
            "transaction_id": .string(id), "original_transaction_id": .string(original), "environment": .string(notification.environment.rawValue),
            "bundle_id": .string(notification.bundleId), "product_id": text(t.productId), "offer_identifier": .string(offer),
            "purchase_date": millis(t.purchaseDate ?? transaction.signedDate), "app_account_token": text(t.appAccountToken),
        ]))
    }

    /// Links each redeeming purchase to the latest unredeemed signature of its offer and product issued to the same
    /// customer (their appAccountToken, or a signature naming a transaction of the same subscription) before the
    /// purchase (5 minutes of clock slack): the nonce ledger's `redeemed_transaction_id` (docs/offers.md). A purchase
    /// links at most one signature, once: replays change nothing.
    static func offerRedemptionStatement(rows: String) -> PostgresQuery {
        """
        WITH redeemed AS (
            SELECT r.transaction_id, r.original_transaction_id, r.environment, r.bundle_id, r.product_id, r.offer_identifier,
                to_timestamp(r.purchase_date / 1000.0) AS purchased, lower(r.app_account_token) AS token
            FROM jsonb_to_recordset(\(rows)::jsonb) AS r(transaction_id text,
                original_transaction_id text, environment text, bundle_id text, product_id text, offer_identifier text, purchase_date bigint,
                app_account_token text)
            WHERE NOT EXISTS (SELECT 1 FROM offer_signatures x WHERE x.redeemed_transaction_id = r.transaction_id)
        ), chosen AS (
            SELECT DISTINCT ON (d.transaction_id) s.nonce, s.customer_id, d.transaction_id, d.purchased
            FROM redeemed d JOIN offer_signatures s ON s.bundle_id = d.bundle_id AND s.offer_identifier = d.offer_identifier
                AND s.product_id = d.product_id AND s.environment = d.environment AND s.kind = 'promotional-offer'
                AND s.redeemed_transaction_id IS NULL AND s.issued_at <= d.purchased + interval '5 minutes'
                AND (s.customer_id = d.token OR s.transaction_id = d.original_transaction_id
                     OR s.transaction_id IN (SELECT t.transaction_id FROM transactions t WHERE t.original_transaction_id = d.original_transaction_id))
            ORDER BY d.transaction_id, s.issued_at DESC
        )
        UPDATE offer_signatures s SET redeemed_transaction_id = c.transaction_id, redeemed_at = c.purchased
        FROM chosen c WHERE s.nonce = c.nonce AND s.customer_id = c.customer_id
        RETURNING s.nonce, s.customer_id, s.offer_identifier, c.transaction_id, s.issued_at
        """
    }

    static func transactionStatement(rows: String) -> PostgresQuery {
        """
        INSERT INTO transactions (transaction_id, original_transaction_id, environment, bundle_id, product_id, type, purchase_date,
            expires_date, quantity, revocation_date, revocation_reason, revocation_type, price, currency, app_account_token,
            ownership_type, signed_date, revocation_percentage, app_transaction_id, payload)
        SELECT r.transaction_id, r.original_transaction_id, r.environment, r.bundle_id, r.product_id, r.type,
            to_timestamp(r.purchase_date / 1000.0), to_timestamp(r.expires_date / 1000.0), r.quantity,
            to_timestamp(r.revocation_date / 1000.0), r.revocation_reason, r.revocation_type, r.price, r.currency,
            r.app_account_token, r.ownership_type, to_timestamp(r.signed_date / 1000.0), r.revocation_percentage,
            r.app_transaction_id, r.payload
        FROM jsonb_to_recordset(\(rows)::jsonb) AS r(transaction_id text, original_transaction_id text, environment text,
            bundle_id text, product_id text, type text, purchase_date bigint, expires_date bigint, quantity integer,
            revocation_date bigint, revocation_reason integer, revocation_type text, price bigint, currency text,
            app_account_token text, ownership_type text, signed_date bigint, revocation_percentage integer,
            app_transaction_id text, payload jsonb)
        ON CONFLICT (transaction_id, original_transaction_id) DO UPDATE SET
            product_id = EXCLUDED.product_id, type = EXCLUDED.type, purchase_date = EXCLUDED.purchase_date,
            expires_date = EXCLUDED.expires_date, quantity = EXCLUDED.quantity, revocation_date = EXCLUDED.revocation_date,
            revocation_reason = EXCLUDED.revocation_reason, revocation_type = EXCLUDED.revocation_type, price = EXCLUDED.price,
            currency = EXCLUDED.currency, app_account_token = EXCLUDED.app_account_token, ownership_type = EXCLUDED.ownership_type,
            signed_date = EXCLUDED.signed_date, revocation_percentage = EXCLUDED.revocation_percentage,
            app_transaction_id = EXCLUDED.app_transaction_id, payload = EXCLUDED.payload
        WHERE transactions.signed_date < EXCLUDED.signed_date
        """
    }

    /// One entitlement row for `entitlementStatement`: its scalar columns as a JSON object, and its two JSON
    /// documents (`state`, `last_event_after`) as texts of their own, so PostgreSQL parses each once (inside the
    /// rows' JSON they were escaped strings, unescaped and then parsed again).
    struct EntitlementRow {
        var columns: JSONValue
        var state: String
        /// Empty for none.
        var lastEventAfter = ""
    }

    static func entitlementRow(_ row: LockedRow) throws -> EntitlementRow {
        var result = try entitlementRow(row.state)
        if case .object(var object) = result.columns {
            object["event_sequence"] = row.eventSequence > 0 ? .number(JSONNumber(row.eventSequence)) : .null
            result.columns = .object(object)
        }
        result.lastEventAfter = row.lastEventAfter.map { $0.json.serialized } ?? ""
        return result
    }

    static func entitlementRow(_ s: EntitlementState) throws -> EntitlementRow {
        EntitlementRow(columns: .object(JSONObject([
            "environment": .string(s.environment),
            "bundle_id": .string(s.bundleId),
            "original_transaction_id": .string(s.originalTransactionId),
            "product_id": text(s.productId),
            "subscription_group_id": text(s.subscriptionGroupIdentifier),
            "status": .string(s.status.rawValue),
            "expires_at": millis(s.expiresAt),
            "grace_period_expires_at": millis(s.gracePeriodExpiresAt),
            "auto_renew_status": integer(s.autoRenewStatus),
            "auto_renew_product_id": text(s.autoRenewProductId),
            "billing_issue_since": millis(s.billingIssueSince),
            "revocation_date": millis(s.revocationDate),
            "revocation_reason": integer(s.revocationReason),
            "revocation_type": text(s.revocationType),
            "ownership_type": text(s.ownershipType),
            "offer_type": integer(s.offerType),
            "offer_identifier": text(s.offerIdentifier),
            "offer_discount_type": text(s.offerDiscountType),
            "app_account_token": text(s.appAccountToken),
            "price": integer(s.price),
            "currency": text(s.currency),
            "last_notification_type": .string(s.lastNotificationType),
            "last_notification_subtype": text(s.lastNotificationSubtype),
            "last_signed_date": millis(s.lastSignedDate),
            "apple_status": integer(s.appleStatus),
            "period_transaction_id": text(s.periodTransactionId),
            "period_purchase_date": millis(s.periodPurchaseDate),
            "revocation_percentage": integer(s.revocationPercentage),
            "app_transaction_id": text(s.appTransactionId),
            "previous_original_transaction_id": text(s.previousOriginalTransactionId),
            "superseded_by": text(s.supersededBy),
            "last_notification_uuid": text(s.lastNotificationUUID),
            "last_order_key": .string(EntitlementTransition.order(of: s).key),
            "contradiction": text(s.contradiction),
            "contradicted_since": millis(s.contradictedSince),
            "contradiction_grants_until": millis(s.contradictionGrantsUntil),
        ])), state: String(decoding: try JSONEncoder().encode(s), as: UTF8.self))
    }

    /// The order guard: a row only ever moves to the state of a notification later in `EntitlementTransition.Order`
    /// (signedDate, status severity, notificationUUID: `last_order_key`, compared byte-wise whatever the
    /// database's collation). Rows written before schema 4 have no key: their signedDate decides, ties applied.
    static func entitlementStatement(_ rows: [EntitlementRow]) -> PostgresQuery {
        """
        INSERT INTO entitlements (environment, bundle_id, original_transaction_id, product_id, subscription_group_id, status,
            expires_at, grace_period_expires_at, auto_renew_status, auto_renew_product_id, billing_issue_since, revocation_date,
            revocation_reason, revocation_type, ownership_type, offer_type, offer_identifier, offer_discount_type,
            app_account_token, price, currency, last_notification_type, last_notification_subtype, last_signed_date,
            apple_status, period_transaction_id, period_purchase_date, revocation_percentage, app_transaction_id,
            previous_original_transaction_id, superseded_by, last_notification_uuid, last_order_key, state, event_sequence,
            last_event_after, contradiction, contradicted_since, contradiction_grants_until, updated_at)
        SELECT r.environment, r.bundle_id, r.original_transaction_id, r.product_id, r.subscription_group_id, r.status,
            to_timestamp(r.expires_at / 1000.0), to_timestamp(r.grace_period_expires_at / 1000.0), r.auto_renew_status,
            r.auto_renew_product_id, to_timestamp(r.billing_issue_since / 1000.0), to_timestamp(r.revocation_date / 1000.0),
            r.revocation_reason, r.revocation_type, r.ownership_type, r.offer_type, r.offer_identifier, r.offer_discount_type,
            r.app_account_token, r.price, r.currency, r.last_notification_type, r.last_notification_subtype,
            to_timestamp(r.last_signed_date / 1000.0), r.apple_status, r.period_transaction_id,
            to_timestamp(r.period_purchase_date / 1000.0), r.revocation_percentage, r.app_transaction_id,
            r.previous_original_transaction_id, r.superseded_by, r.last_notification_uuid, r.last_order_key, r.state::jsonb, r.event_sequence,
            NULLIF(r.last_event_after, '')::jsonb, r.contradiction, to_timestamp(r.contradicted_since / 1000.0),
            to_timestamp(r.contradiction_grants_until / 1000.0), now()
        FROM ROWS FROM (
            jsonb_to_recordset(\(JSONValue.array(rows.map(\.columns)).serialized)::jsonb) AS (environment text, bundle_id text, original_transaction_id text, product_id text,
            subscription_group_id text, status text, expires_at bigint, grace_period_expires_at bigint, auto_renew_status integer,
            auto_renew_product_id text, billing_issue_since bigint, revocation_date bigint, revocation_reason integer,
            revocation_type text, ownership_type text, offer_type integer, offer_identifier text, offer_discount_type text,
            app_account_token text, price bigint, currency text, last_notification_type text, last_notification_subtype text,
            last_signed_date bigint, apple_status integer, period_transaction_id text, period_purchase_date bigint,
            revocation_percentage integer, app_transaction_id text, previous_original_transaction_id text, superseded_by text,
            last_notification_uuid text, last_order_key text, event_sequence bigint,
            contradiction text, contradicted_since bigint, contradiction_grants_until bigint),
            unnest(\(rows.map(\.state))::text[]),
            unnest(\(rows.map(\.lastEventAfter))::text[])
        ) AS r(environment, bundle_id, original_transaction_id, product_id, subscription_group_id, status, expires_at, grace_period_expires_at,
            auto_renew_status, auto_renew_product_id, billing_issue_since, revocation_date, revocation_reason, revocation_type, ownership_type,
            offer_type, offer_identifier, offer_discount_type, app_account_token, price, currency, last_notification_type,
            last_notification_subtype, last_signed_date, apple_status, period_transaction_id, period_purchase_date, revocation_percentage,
            app_transaction_id, previous_original_transaction_id, superseded_by, last_notification_uuid, last_order_key, event_sequence,
            contradiction, contradicted_since, contradiction_grants_until, state, last_event_after)
        ON CONFLICT (environment, bundle_id, original_transaction_id) DO UPDATE SET
            product_id = EXCLUDED.product_id, subscription_group_id = EXCLUDED.subscription_group_id, status = EXCLUDED.status,
            expires_at = EXCLUDED.expires_at, grace_period_expires_at = EXCLUDED.grace_period_expires_at,
            auto_renew_status = EXCLUDED.auto_renew_status, auto_renew_product_id = EXCLUDED.auto_renew_product_id,
            billing_issue_since = EXCLUDED.billing_issue_since, revocation_date = EXCLUDED.revocation_date,
            revocation_reason = EXCLUDED.revocation_reason, revocation_type = EXCLUDED.revocation_type,
            ownership_type = EXCLUDED.ownership_type, offer_type = EXCLUDED.offer_type, offer_identifier = EXCLUDED.offer_identifier,
            offer_discount_type = EXCLUDED.offer_discount_type, app_account_token = EXCLUDED.app_account_token,
            price = EXCLUDED.price, currency = EXCLUDED.currency, last_notification_type = EXCLUDED.last_notification_type,
            last_notification_subtype = EXCLUDED.last_notification_subtype, last_signed_date = EXCLUDED.last_signed_date,
            apple_status = EXCLUDED.apple_status, period_transaction_id = EXCLUDED.period_transaction_id,
            period_purchase_date = EXCLUDED.period_purchase_date, revocation_percentage = EXCLUDED.revocation_percentage,
            app_transaction_id = EXCLUDED.app_transaction_id,
            previous_original_transaction_id = EXCLUDED.previous_original_transaction_id, superseded_by = EXCLUDED.superseded_by,
            last_notification_uuid = EXCLUDED.last_notification_uuid, last_order_key = EXCLUDED.last_order_key,
            state = EXCLUDED.state, event_sequence = EXCLUDED.event_sequence, last_event_after = EXCLUDED.last_event_after,
            contradiction = EXCLUDED.contradiction, contradicted_since = EXCLUDED.contradicted_since,
            contradiction_grants_until = EXCLUDED.contradiction_grants_until,
            contradiction_pulled_at = CASE WHEN EXCLUDED.contradiction IS NULL THEN NULL ELSE entitlements.contradiction_pulled_at END, updated_at = now()
        WHERE CASE WHEN entitlements.last_order_key IS NULL THEN entitlements.last_signed_date <= EXCLUDED.last_signed_date
            ELSE entitlements.last_order_key COLLATE "C" < EXCLUDED.last_order_key COLLATE "C" END
        """
    }
}

extension StoredNotification {
    /// The subscription (or one-time purchase) this notification concerns, if it carries a transaction.
    var entitlementKey: EntitlementStore.EntitlementKey? {
        guard let originalTransactionId = verified.transactionInfo?.model.originalTransactionId else { return nil }
        return EntitlementStore.EntitlementKey(environment: verified.environment.rawValue, bundleId: verified.bundleId, originalTransactionId: originalTransactionId)
    }

    /// Every row the notification may change: its subscription's, and the one it continues after a migration.
    var entitlementKeys: [EntitlementStore.EntitlementKey] {
        guard let key = entitlementKey else { return [] }
        guard let previous = verified.transactionInfo?.model.previousOriginalTransactionId, previous != key.originalTransactionId else { return [key] }
        return [key, EntitlementStore.EntitlementKey(environment: key.environment, bundleId: key.bundleId, originalTransactionId: previous)]
    }
}

extension String {
    /// Byte order, as PostgreSQL's `COLLATE "C"` sorts: the one order every worker locks and inserts rows in.
    static func precedesInByteOrder(_ a: String, _ b: String) -> Bool {
        a.utf8.lexicographicallyPrecedes(b.utf8)
    }
}

/// The statement, lock and idle-in-transaction timeouts of one transaction, shared by the stores.
package enum StatementTimeouts {
    package static func apply(_ statementTimeout: Duration?, on connection: PostgresConnection, logger: Logger) async throws {
        guard let statementTimeout else { return }
        let milliseconds = max(1, Int(statementTimeout.wholeMilliseconds))
        let value = String(milliseconds)
        // One statement (a prepared statement holds one command); `true`: local to this transaction, like SET LOCAL.
        try await connection.query(
            """
            SELECT set_config('statement_timeout', \(value), true), set_config('lock_timeout', \(value), true),
                set_config('idle_in_transaction_session_timeout', \(value), true)
            """,
            logger: logger)
    }
}
