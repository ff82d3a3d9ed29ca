import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

/// Who or what an erasure is about, as its caller names it.
public struct ErasureSubject: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case customerId, appAccountToken, originalTransactionId, appTransactionId

        var identifierKind: ErasedIdentifierKind {
            switch self {
            case .customerId: .customerId
            case .appAccountToken: .appAccountToken
            case .originalTransactionId: .originalTransactionId
            case .appTransactionId: .appTransactionId
            }
        }
    }

    public var kind: Kind
    public var value: String
    public var bundleId: String

    public init(_ kind: Kind, _ value: String, bundleId: String) {
        self.kind = kind
        self.value = value
        self.bundleId = bundleId
    }

    var identifier: ErasedIdentifier { ErasedIdentifier(kind.identifierKind, bundleId: bundleId, value: value) }

    /// Whether `value` has the shape of a UUID (8-4-4-4-12 hex digits), as app account tokens do.
    static func isUUIDShaped(_ value: String) -> Bool { UUID(uuidString: value) != nil }
}

/// One erasure as it was asked for.
public struct ErasureRequest: Sendable, Hashable {
    public var requestId: String
    public var subject: ErasureSubject
    /// Why (a ticket, "GDPR art. 17 request"): kept with the request; write no personal data here.
    public var reason: String
    /// `pipelinectl`, `customer-api:<key id>`, `console:<operator>`, `worker:RESCIND_CONSENT`.
    public var requestedBy: String

    public init(requestId: String = ErasureRequest.newRequestId(), subject: ErasureSubject, reason: String, requestedBy: String) {
        self.requestId = requestId
        self.subject = subject
        self.reason = reason
        self.requestedBy = requestedBy
    }

    /// A request id nobody can guess (`er_` and 24 hex digits).
    public static func newRequestId() -> String {
        "er_" + Hex.encode((0..<12).map { _ in UInt8.random(in: 0...255) })
    }

    /// Request ids given by callers: letters, digits, `._:-`, at most 64 (the id is an event's subject and a path segment).
    public static func isValidRequestId(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64 && id.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || [0x2E, 0x5F, 0x3A, 0x2D].contains(byte)
        }
    }
}

/// What an erasure did, as `pipelinectl`, the customer API and the console show it: counts only, no identifiers.
public struct ErasureReport: Sendable, Hashable {
    public var requestId: String
    public var bundleId: String
    public var subjectKind: String
    public var status: String
    public var reason: String
    public var requestedBy: String
    public var requestedAt: Date
    public var completedAt: Date?
    /// Rows removed (or, for `notification_ledger` and `console_audit`, emptied) per table, and `identifiers`: the
    /// suppression entries written.
    public var counts: [String: Int]

    public var subscriptions: Int { counts["subscriptions"] ?? 0 }

    public var json: JSONObject {
        var countsObject = JSONObject()
        for (table, count) in counts.sorted(by: { $0.key < $1.key }) { countsObject[table] = .number(JSONNumber(Int64(count))) }
        return JSONObject([
            "requestId": .string(requestId), "bundleId": .string(bundleId), "subjectKind": .string(subjectKind), "status": .string(status),
            "reason": .string(reason), "requestedBy": .string(requestedBy), "requestedAt": .string(Timestamp(requestedAt).rfc3339Milliseconds),
            "completedAt": completedAt.map { .string(Timestamp($0).rfc3339Milliseconds) } ?? .null, "counts": .object(countsObject),
        ])
    }
}

/// An erasure could not run or be checked; each says what to do.
public enum ErasureFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// Suppression entries exist but this process has no key to check records against them.
    case keyMissing
    /// Suppression entries were made with another key (fingerprints listed).
    case keyMismatch(ours: String, theirs: [String])
    /// The request id is taken, in this app, by an erasure of another subject.
    case requestIdTaken(String)

    public var description: String {
        switch self {
        case .keyMissing:
            "erasure suppression entries exist but this process has no erasure key: set ERASURE_KEY_FILE (or ERASURE_KEY) to the key the erasures used; records wait until it is set, so no erased customer comes back"
        case .keyMismatch(let ours, let theirs):
            "this process's erasure key (fingerprint \(ours)) is not the one in force, which the suppression entries were made with (fingerprint \(theirs.joined(separator: ", "))): give this process the same ERASURE_KEY_FILE as the workers; nothing is erased or applied until then"
        case .requestIdTaken(let id):
            "the request id \(UntrustedText.quoted(id, limit: 70)) belongs to an erasure of another subject in this app; choose another"
        }
    }
}

extension ErasureFailure {
    /// Runs `body`, rethrowing an `ErasureFailure` its transaction failed with as itself (not wrapped in
    /// `PostgresTransactionError`), so callers can tell it apart (the customer API's 409, the worker's log).
    static func unwrapped<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PostgresTransactionError {
            if let failure = error.closureError as? ErasureFailure { throw failure }
            throw error
        }
    }
}

/// Erasure (docs/privacy.md): resolves a customer, deletes what the pipeline keeps about them, records keyed
/// digests so replays keep them forgotten, and says so with a `customer.erased` event: one transaction.
public typealias ErasureStore = DatabaseQueries<ErasureQueries>

/// Marks erasure's queries (`ErasureStore`).
public enum ErasureQueries {}

extension ErasureStore {
    /// `ErasureLock`: taken exclusively here, shared by every worker batch and webhook enqueue.
    static var lockKey: Int64 { ErasureLock.advisoryKey }

    /// How many rounds of "subscriptions → customers and tokens → subscriptions" resolution follow at most.
    static var resolutionRounds: Int { 8 }

    /// Runs one erasure (idempotent by request id: the same request again answers its report). `emitsEvents`:
    /// whether `customer.erased` goes to the outbox (`EVENTS_ENABLED`).
    public func erase(_ request: ErasureRequest, key: ErasureKey, emitsEvents: Bool = true, statementTimeout: Duration? = .seconds(120)) async throws -> ErasureReport {
        if emitsEvents {
            // The outbox's partition of today, outside the transaction (the attach waits for no writer).
            try await TimePartitions().ensure(
                tables: [TimePartitions.outboxTable], period: .day, instants: [Int64(Date().timeIntervalSince1970 * 1000)], client: client, logger: logger)
        }
        return try await ErasureFailure.unwrapped {
            try await client.withTransaction(logger: logger) { connection in
                try await StatementTimeouts.apply(statementTimeout, on: connection, logger: logger)
                // Resolved once before the lock (indexed reads; it also warms what the locked pass reads), so the
                // exclusive lock, which holds every worker batch back, covers only the second, fast pass and the writes.
                let unlocked = try await resolve(request.subject, on: connection)
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.lockKey))", logger: logger)
                return try await erase(request, key: key, emitsEvents: emitsEvents, resolvedBefore: unlocked, on: connection)
            }
        }
    }

    /// `resolvedBefore`: the subject as resolved before the lock, the start of the locked pass (which then usually
    /// takes one round to confirm that nothing new was written meanwhile).
    func erase(
        _ request: ErasureRequest, key: ErasureKey, emitsEvents: Bool, resolvedBefore: ResolvedSubject? = nil, on connection: PostgresConnection
    ) async throws -> ErasureReport {
        // One key in force: an eraser holding another key than the one the list was made with would write entries no
        // worker can match; refused (under the lock, so two first erasures with two keys cannot both pass).
        try await checkKey(key, on: connection)
        let subjectDigest = Hex.encode(key.digest(request.subject.identifier))
        if let existing = try await report(requestId: request.requestId, bundleId: request.subject.bundleId, on: connection) {
            guard existing.status == "pending" else {
                let digest = try await strings(
                    """
                    SELECT encode(subject_digest, 'hex') FROM erasure_requests
                    WHERE bundle_id = \(request.subject.bundleId) AND request_id = \(request.requestId)
                    """, on: connection
                ).first
                guard digest == subjectDigest else { throw ErasureFailure.requestIdTaken(request.requestId) }
                return existing
            }
        }
        let bundleId = request.subject.bundleId
        let subject = try await resolve(request.subject, from: resolvedBefore, on: connection)
        var counts: [String: Int] = ["subscriptions": subject.originalTransactionIds.count]


        // The keyed digests first: from here on, a record about any of these identifiers is suppressed.
        let now = Date()
        var identifiers: [ErasedIdentifier] = [request.subject.identifier]
        func add(_ kind: ErasedIdentifierKind, _ values: Set<String>) {
            identifiers += values.sorted().map { ErasedIdentifier(kind, bundleId: bundleId, value: $0) }
        }
        add(.originalTransactionId, subject.originalTransactionIds)
        add(.transactionId, subject.transactionIds)
        add(.appAccountToken, subject.appAccountTokens)
        add(.customerId, subject.customerIds)
        add(.appTransactionId, subject.appTransactionIds)
        // A UUID-shaped customer id is what the app also hands StoreKit as `appAccountToken` (the customer API's
        // convention), and a token may name a customer: each is suppressed as both kinds, so a notification signed
        // before the erasure that carries the id as its token (in flight, or retried by Apple after an outage) stays
        // suppressed even when nothing was stored yet.
        let people = subject.customerIds.union(subject.appAccountTokens).union(
            [ErasureSubject.Kind.customerId, .appAccountToken].contains(request.subject.kind) ? [request.subject.value.lowercased()] : [])
        let uuidShaped = people.filter(ErasureSubject.isUUIDShaped)
        add(.customerId, uuidShaped)
        add(.appAccountToken, uuidShaped)
        let digests = Array(Set(identifiers.map { Hex.encode(key.digest($0)) + ":" + $0.kind.rawValue })).sorted()
        try await connection.query("INSERT INTO erasure_keys (key_id) VALUES (\(key.id)) ON CONFLICT DO NOTHING", logger: logger)
        try await connection.query(
            """
            INSERT INTO erasure_suppressions (digest, bundle_id, kind, key_id, erased_at, request_id)
            SELECT decode(split_part(d, ':', 1), 'hex'), \(bundleId), split_part(d, ':', 2), \(key.id), \(now), \(request.requestId)
            FROM unnest(\(digests)::text[]) AS d
            ON CONFLICT (digest) DO UPDATE SET erased_at = greatest(erasure_suppressions.erased_at, EXCLUDED.erased_at), request_id = EXCLUDED.request_id
            """,
            logger: logger)
        counts["identifiers"] = digests.count

        let otids = Array(subject.originalTransactionIds)
        let txids = Array(subject.transactionIds)
        let customers = Array(subject.customerIds.union(subject.appAccountTokens))
        let appTransactionIds = Array(subject.appTransactionIds)
        let uuids = Array(subject.notificationUUIDs)
        let eventIds = try await strings(
            """
            SELECT event_id FROM entitlement_events_outbox
            WHERE (bundle_id = \(bundleId) AND original_transaction_id = ANY(\(otids)::text[]))
               OR (bundle_id = \(bundleId) AND event_type = 'consent.rescinded' AND subject = ANY(\(appTransactionIds)::text[]))
            UNION
            SELECT event_id FROM webhook_deliveries WHERE subject = ANY(\(otids + appTransactionIds)::text[])
            """, on: connection)
        try await connection.query(
            "INSERT INTO erased_events (event_id, erased_at) SELECT e, \(now) FROM unnest(\(Array(eventIds))::text[]) AS e ON CONFLICT DO NOTHING", logger: logger)
        counts["events"] = eventIds.count

        // Every delete in one statement (one round trip under the lock): each a data-modifying CTE counting its rows.
        // They see one snapshot; none deletes what another one reads, and the attempts go with their deliveries.
        let events = Array(eventIds)
        let tables: [(String, String)] = [
            ("webhook_deliveries", "DELETE FROM webhook_deliveries WHERE event_id = ANY($1::text[]) OR subject = ANY($2::text[]) RETURNING 1"),
            // No foreign key deletes the attempts with their deliveries (migration 28): the same deliveries, by this statement's snapshot.
            ("webhook_attempts", """
                DELETE FROM webhook_attempts a WHERE a.subject = ANY($2::text[]) OR (a.delivery_id, a.subject) IN (
                    SELECT id, subject FROM webhook_deliveries WHERE event_id = ANY($1::text[])) RETURNING 1
                """),
            ("entitlement_events_outbox", "DELETE FROM entitlement_events_outbox WHERE event_id = ANY($1::text[]) RETURNING 1"),
            ("notification_deliveries", "DELETE FROM notification_deliveries WHERE notification_uuid = ANY($3::text[]) RETURNING 1"),
            ("notification_archive", "DELETE FROM notification_archive WHERE notification_uuid = ANY($3::text[]) RETURNING 1"),
            // The ledger keeps the UUID (still a duplicate on replay) but not the routing key (an original transaction id).
            ("notification_ledger", """
                UPDATE notification_ledger SET outcome = 'erased', routing_key = notification_uuid WHERE notification_uuid = ANY($3::text[]) RETURNING 1
                """),
            ("consumption_requests", "DELETE FROM consumption_requests WHERE original_transaction_id = ANY($4::text[]) OR notification_uuid = ANY($3::text[]) RETURNING 1"),
            ("transaction_grace", "DELETE FROM transaction_grace WHERE transaction_id = ANY($5::text[]) RETURNING 1"),
            ("transaction_history_revisions", "DELETE FROM transaction_history_revisions WHERE bundle_id = $6 AND transaction_id = ANY($5::text[] || $4::text[]) RETURNING 1"),
            ("transactions", "DELETE FROM transactions WHERE transaction_id = ANY($5::text[]) OR (bundle_id = $6 AND original_transaction_id = ANY($4::text[])) RETURNING 1"),
            ("entitlements", "DELETE FROM entitlements WHERE bundle_id = $6 AND original_transaction_id = ANY($4::text[]) RETURNING 1"),
            ("customer_ownership", """
                DELETE FROM customer_ownership WHERE bundle_id = $6 AND (original_transaction_id = ANY($4::text[]) OR customer_id = ANY($7::text[])) RETURNING 1
                """),
            ("customer_purchases", """
                DELETE FROM customer_purchases WHERE bundle_id = $6 AND (original_transaction_id = ANY($4::text[])
                    OR transaction_id = ANY($5::text[]) OR customer_id = ANY($7::text[])) RETURNING 1
                """),
            ("customer_transfers", """
                DELETE FROM customer_transfers WHERE bundle_id = $6 AND (original_transaction_id = ANY($4::text[])
                    OR from_customer_id = ANY($7::text[]) OR to_customer_id = ANY($7::text[])) RETURNING 1
                """),
            ("renewal_extensions", "DELETE FROM renewal_extensions WHERE bundle_id = $6 AND original_transaction_id = ANY($4::text[]) RETURNING 1"),
            // Offer signatures issued to the customer (docs/offers.md), redeemed or not.
            ("offer_signatures", """
                DELETE FROM offer_signatures WHERE bundle_id = $6 AND (customer_id = ANY($7::text[]) OR transaction_id = ANY($5::text[] || $4::text[])) RETURNING 1
                """),
            ("dead_lettered_records", "DELETE FROM dead_lettered_records WHERE original_transaction_id = ANY($4::text[]) OR notification_uuid = ANY($3::text[]) RETURNING 1"),
            ("console_audit", """
                UPDATE console_audit SET original_transaction_id = NULL, customer_id = NULL, reason = '(erased: ' || $8 || ')', detail = NULL
                WHERE original_transaction_id = ANY($4::text[]) OR lower(customer_id) = ANY($7::text[]) RETURNING 1
                """),
        ]
        let environments = try await strings(
            "SELECT DISTINCT environment FROM entitlements WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(otids)::text[])", on: connection)
        var binds = PostgresBindings()
        binds.append(events)
        binds.append(otids + appTransactionIds)
        binds.append(uuids)
        binds.append(otids)
        binds.append(txids)
        binds.append(bundleId)
        binds.append(customers)
        binds.append(request.requestId)
        let sql = "WITH " + tables.enumerated().map { "d\($0.offset) AS (\($0.element.1))" }.joined(separator: ",\n")
            + "\nSELECT " + tables.indices.map { "(SELECT count(*) FROM d\($0))::bigint" }.joined(separator: ", ")
        let rows = try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger)
        for try await row in rows {
            let cells = row.makeRandomAccess()
            for (index, table) in tables.enumerated() { counts[table.0, default: 0] += Int(try cells[index].decode(Int64.self)) }
        }
        counts["notifications"] = counts["notification_archive"]
        // The metrics' rollups: the erased subscriptions' periods and marks go, their contribution is subtracted
        // (their deletes above marked them), and refund-request changes naming them are folded into bare counts.
        try await connection.query("SELECT metric_rollups_forget(\(otids)::text[])", logger: logger)

        if emitsEvents {
            let time = Timestamp(now)
            let erased = (environments.isEmpty ? ["Production"] : environments.sorted()).map { environment in
                EntitlementEvent.erasure(
                    requestId: request.requestId, bundleId: bundleId, environment: environment, erasedAt: time, subscriptions: subject.originalTransactionIds.count,
                    notifications: counts["notification_archive"] ?? 0, events: eventIds.count)
            }
            try await connection.query(EntitlementStore.outboxStatement(erased), logger: logger)
        }
        var summary = JSONObject()
        for (table, count) in counts.sorted(by: { $0.key < $1.key }) { summary[table] = .number(JSONNumber(Int64(count))) }
        try await connection.query(
            """
            INSERT INTO erasure_requests (request_id, bundle_id, subject_kind, subject_digest, reason, requested_by, status, requested_at, completed_at, summary)
            VALUES (\(request.requestId), \(bundleId), \(request.subject.kind.rawValue), decode(\(subjectDigest), 'hex'), \(request.reason),
                \(request.requestedBy), 'completed', \(now), \(now), \(summary.serialized)::jsonb)
            ON CONFLICT (bundle_id, request_id) DO UPDATE SET status = 'completed', pending_subject = NULL, completed_at = EXCLUDED.completed_at,
                summary = EXCLUDED.summary
            """,
            logger: logger)
        logger.notice("erased a customer", metadata: ["request_id": "\(request.requestId)", "subscriptions": "\(subject.originalTransactionIds.count)"])
        return try await report(requestId: request.requestId, bundleId: bundleId, on: connection)!
    }

    /// Refuses a key whose fingerprint is not the one the suppression list was made with (`keyMismatch`, naming
    /// both). The first erasure records its key's fingerprint; there is no rotation (docs/privacy.md: re-keying
    /// would need the identifiers, which by design no longer exist).
    func checkKey(_ key: ErasureKey, on connection: PostgresConnection) async throws {
        let known = try await strings("SELECT key_id FROM erasure_keys", on: connection)
        guard known.isEmpty || known.contains(key.id) else { throw ErasureFailure.keyMismatch(ours: key.id, theirs: known.sorted()) }
    }

    /// The identifiers an erasure reaches, resolved within one app.
    typealias ResolvedSubject = ErasureResolvedSubject

    /// Customer ids are compared as stored (the customer API keeps them in lower case, and the subject's set is
    /// lowercased), so the `(bundle_id, customer_id)` indexes serve; tokens from Apple are compared lowercased, as
    /// their expression indexes are.
    ///
    /// From the subject to everything linked to it, within its app: a customer's subscriptions (ownership, accepted
    /// purchases, tokens), each subscription's chain (`previousOriginalTransactionId`, `supersededBy`), their
    /// tokens, app transactions and owners, again, until nothing new is found (at most `resolutionRounds` rounds);
    /// then their transactions and the notifications and pulled records about them.
    func resolve(_ subject: ErasureSubject, from start: ResolvedSubject? = nil, on connection: PostgresConnection) async throws -> ResolvedSubject {
        let bundleId = subject.bundleId
        var resolved = start ?? ResolvedSubject()
        switch subject.kind {
        case .customerId: resolved.customerIds.insert(subject.value.lowercased())
        case .appAccountToken: resolved.appAccountTokens.insert(subject.value.lowercased())
        case .originalTransactionId: resolved.originalTransactionIds.insert(subject.value)
        case .appTransactionId: resolved.appTransactionIds.insert(subject.value)
        }
        for _ in 0..<Self.resolutionRounds {
            let before = (resolved.originalTransactionIds.count, resolved.customerIds.count, resolved.appAccountTokens.count, resolved.appTransactionIds.count)
            let people = Array(resolved.customerIds.union(resolved.appAccountTokens))
            let otids = Array(resolved.originalTransactionIds)
            let apps = Array(resolved.appTransactionIds)
            resolved.originalTransactionIds.formUnion(try await strings(
                """
                SELECT original_transaction_id FROM customer_ownership WHERE bundle_id = \(bundleId) AND customer_id = ANY(\(people)::text[])
                UNION SELECT original_transaction_id FROM customer_purchases
                    WHERE bundle_id = \(bundleId) AND customer_id = ANY(\(people)::text[]) AND status = 'accepted'
                UNION SELECT original_transaction_id FROM entitlements WHERE bundle_id = \(bundleId)
                    AND (lower(app_account_token) = ANY(\(people)::text[]) OR app_transaction_id = ANY(\(apps)::text[]))
                UNION SELECT original_transaction_id FROM transactions WHERE bundle_id = \(bundleId)
                    AND (lower(app_account_token) = ANY(\(people)::text[]) OR app_transaction_id = ANY(\(apps)::text[]))
                UNION SELECT original_transaction_id FROM entitlements WHERE bundle_id = \(bundleId)
                    AND (previous_original_transaction_id = ANY(\(otids)::text[]) OR superseded_by = ANY(\(otids)::text[]))
                UNION SELECT unnest(ARRAY[previous_original_transaction_id, superseded_by]) FROM entitlements
                    WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(otids)::text[])
                """, on: connection))
            let all = Array(resolved.originalTransactionIds)
            resolved.customerIds.formUnion(try await strings(
                """
                SELECT lower(customer_id) FROM customer_ownership WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(all)::text[])
                """, on: connection))
            resolved.appAccountTokens.formUnion(try await strings(
                """
                SELECT lower(app_account_token) FROM entitlements WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(all)::text[])
                UNION SELECT lower(app_account_token) FROM transactions WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(all)::text[])
                """, on: connection))
            resolved.appTransactionIds.formUnion(try await strings(
                """
                SELECT app_transaction_id FROM entitlements WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(all)::text[])
                UNION SELECT app_transaction_id FROM transactions WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(all)::text[])
                """, on: connection))
            let after = (resolved.originalTransactionIds.count, resolved.customerIds.count, resolved.appAccountTokens.count, resolved.appTransactionIds.count)
            if after == before { break }
        }
        let otids = Array(resolved.originalTransactionIds)
        let people = Array(resolved.customerIds.union(resolved.appAccountTokens))
        resolved.transactionIds = try await strings(
            """
            SELECT transaction_id FROM transactions WHERE bundle_id = \(bundleId) AND original_transaction_id = ANY(\(otids)::text[])
            UNION SELECT transaction_id FROM customer_purchases WHERE bundle_id = \(bundleId)
                AND (original_transaction_id = ANY(\(otids)::text[]) OR customer_id = ANY(\(people)::text[]))
            """, on: connection)
        resolved.notificationUUIDs = try await strings(
            """
            SELECT notification_uuid FROM notification_archive WHERE original_transaction_id = ANY(\(otids)::text[]) AND bundle_id = \(bundleId)
            UNION SELECT n.notification_uuid FROM notification_archive n
                WHERE n.bundle_id = \(bundleId) AND n.notification_type = 'RESCIND_CONSENT' AND EXISTS (
                    SELECT 1 FROM unnest(n.nested_bodies) AS b WHERE b::jsonb ->> 'appTransactionId' = ANY(\(Array(resolved.appTransactionIds))::text[]))
            UNION SELECT purchase_key FROM customer_purchases WHERE bundle_id = \(bundleId)
                AND (original_transaction_id = ANY(\(otids)::text[]) OR customer_id = ANY(\(people)::text[]))
            """, on: connection)
        return resolved
    }

    func strings(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> Set<String> {
        var values: Set<String> = []
        for try await value in try await connection.query(query, logger: logger).decode(String?.self) {
            if let value, !value.isEmpty { values.insert(value) }
        }
        return values
    }

    /// An erasure's report, by request id within its app (request ids are scoped by app: another app's id is not
    /// seen). Without `bundleId` (an operator's `pipelinectl`), the newest erasure with that id in any app.
    public func report(requestId: String, bundleId: String? = nil) async throws -> ErasureReport? {
        try await client.withConnection { connection in
            try await report(requestId: requestId, bundleId: bundleId, on: connection)
        }
    }

    func report(requestId: String, bundleId: String?, on connection: PostgresConnection) async throws -> ErasureReport? {
        let rows = try await connection.query(
            """
            SELECT request_id, bundle_id, subject_kind, status, reason, requested_by, requested_at, completed_at, coalesce(summary::text, '{}')
            FROM erasure_requests WHERE request_id = \(requestId) AND (\(bundleId)::text IS NULL OR bundle_id = \(bundleId))
            ORDER BY requested_at DESC LIMIT 1
            """,
            logger: logger)
        for try await (id, bundleId, kind, status, reason, requestedBy, requestedAt, completedAt, summary) in rows.decode(
            (String, String, String, String, String, String, Date, Date?, String).self)
        {
            var counts: [String: Int] = [:]
            if let object = try? StrictJSONParser(maximumDepth: 4).parseObject(Array(summary.utf8)) {
                for member in object { if let count = member.value.int64Value { counts[member.key] = Int(count) } }
            }
            return ErasureReport(
                requestId: id, bundleId: bundleId, subjectKind: kind, status: status, reason: reason, requestedBy: requestedBy, requestedAt: requestedAt,
                completedAt: completedAt, counts: counts)
        }
        return nil
    }

    /// Recent erasures, newest first (the console's list; `pipelinectl customers erasures`).
    public func recentReports(limit: Int = 100) async throws -> [ErasureReport] {
        var ids: [(String, String)] = []
        for try await id in try await client.query("SELECT request_id, bundle_id FROM erasure_requests ORDER BY requested_at DESC LIMIT \(limit)", logger: logger)
            .decode((String, String).self) { ids.append(id) }
        var reports: [ErasureReport] = []
        for (id, bundleId) in ids { if let report = try await report(requestId: id, bundleId: bundleId) { reports.append(report) } }
        return reports
    }

    /// Runs the erasures queued by the worker (RESCIND_CONSENT with `CONSENT_RESCINDED_ERASES`), oldest first.
    public func runPending(key: ErasureKey, emitsEvents: Bool = true, limit: Int = 20) async throws -> [ErasureReport] {
        var pending: [(String, String, String, String, String, String)] = []
        let rows = try await client.query(
            """
            SELECT request_id, bundle_id, subject_kind, pending_subject, reason, requested_by FROM erasure_requests
            WHERE status = 'pending' AND pending_subject IS NOT NULL ORDER BY requested_at LIMIT \(limit)
            """,
            logger: logger
        )
        for try await row in rows.decode((String, String, String, String, String, String).self) { pending.append(row) }
        var reports: [ErasureReport] = []
        for (id, bundleId, kind, value, reason, requestedBy) in pending {
            guard let kind = ErasureSubject.Kind(rawValue: kind) else { continue }
            reports.append(try await erase(
                ErasureRequest(requestId: id, subject: ErasureSubject(kind, value, bundleId: bundleId), reason: reason, requestedBy: requestedBy), key: key,
                emitsEvents: emitsEvents))
        }
        return reports
    }
}

/// The identifiers an erasure reaches, resolved within one app.
struct ErasureResolvedSubject {
    var originalTransactionIds: Set<String> = []
    var transactionIds: Set<String> = []
    var appAccountTokens: Set<String> = []
    var customerIds: Set<String> = []
    var appTransactionIds: Set<String> = []
    var notificationUUIDs: Set<String> = []
}
