import AppStoreNotifications
import EntitlementStore
import Foundation
import PostgresNIO

/// What a search term matched, as stored: the kind (`subscription`, `transaction`, `notification`, `dead letter`,
/// `customer`, `event`, `order`), the app, the subscription's or customer's id, and the matched identifier when it
/// is another (a transaction id, a notificationUUID, an event id). The pages build their links from these.
public struct SearchHit: Sendable, Hashable {
    public var kind: String
    public var bundle: String
    public var id: String?
    public var extra: String?
}

/// A timeline page's position: rows strictly older than this.
public struct TimelineCursor: Sendable, Hashable {
    public var at: Int64
    public var id: String
}

extension TimelineCursor {
    /// `at~id`, as a page link carries it.
    public init?(_ text: String) {
        let parts = text.split(separator: "~", maxSplits: 1)
        guard parts.count == 2, let at = Int64(parts[0]) else { return nil }
        self.init(at: at, id: String(parts[1]))
    }

    public var text: String { "\(at)~\(id)" }
}

extension ConsoleStore {
    /// Every page the term `q` names: a customer id or appAccountToken, an originalTransactionId, a transactionId,
    /// a notificationUUID (stored or dead-lettered), an order id (webOrderLineItemId) or an event id (entitlement
    /// event or webhook delivery).
    public func search(_ term: String) async throws -> [SearchHit] {
        let q = term.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !q.isEmpty, q.utf8.count <= 200 else { return [] }
        let value = try await json(
            """
            SELECT json_agg(DISTINCT m)::text FROM (
                SELECT 'subscription' AS kind, bundle_id AS bundle, original_transaction_id AS id, NULL AS extra FROM entitlements WHERE original_transaction_id = \(q)
                UNION ALL SELECT 'transaction', bundle_id, original_transaction_id, transaction_id FROM transactions WHERE transaction_id = \(q)
                UNION ALL SELECT 'order', bundle_id, original_transaction_id, transaction_id FROM transactions WHERE payload->>'webOrderLineItemId' = \(q)
                UNION ALL SELECT 'notification', bundle_id, original_transaction_id, notification_uuid FROM notification_archive WHERE notification_uuid = \(q)
                UNION ALL SELECT 'dead letter', bundle_id, original_transaction_id, notification_uuid FROM dead_lettered_records WHERE notification_uuid = \(q)
                UNION ALL SELECT 'customer', bundle_id, customer_id, NULL FROM customer_ownership WHERE customer_id = lower(\(q))
                UNION ALL SELECT 'customer', bundle_id, lower(app_account_token), NULL FROM entitlements
                    WHERE app_account_token IS NOT NULL AND lower(app_account_token) = lower(\(q))
                UNION ALL SELECT 'event', bundle_id, original_transaction_id, event_id FROM entitlement_events_outbox WHERE event_id = \(q)
                UNION ALL SELECT 'event', o.bundle_id, o.original_transaction_id, o.event_id FROM webhook_deliveries w
                    JOIN entitlement_events_outbox o ON o.event_id = w.event_id WHERE w.id::text = \(q)
            ) AS m(kind, bundle, id, extra)
            """)
        guard case .array(let rows) = value else { return [] }
        return rows.compactMap { row in
            guard let object = row.objectValue, let kind = object["kind"]?.stringValue else { return nil }
            return SearchHit(kind: kind, bundle: object["bundle"]?.stringValue ?? "", id: object["id"]?.stringValue, extra: object["extra"]?.stringValue)
        }
    }

    /// The subscription's rows now: its entitlement (per environment), its owner, its transactions.
    public func subscription(bundleId: String, originalTransactionId: String) async throws -> JSONValue {
        try await json(
            """
            SELECT json_build_object(
                'entitlements', (SELECT json_agg(json_build_object(
                    'environment', e.environment, 'status', e.status, 'isActive', e.is_active, 'productId', e.product_id,
                    'expiresAt', \(unescaped: Self.iso("e.expires_at")), 'gracePeriodExpiresAt', \(unescaped: Self.iso("e.grace_period_expires_at")),
                    'autoRenewStatus', e.auto_renew_status, 'autoRenewProductId', e.auto_renew_product_id,
                    'appAccountToken', e.app_account_token, 'owner', (SELECT customer_id FROM customer_ownership c
                        WHERE c.environment = e.environment AND c.bundle_id = e.bundle_id AND c.original_transaction_id = e.original_transaction_id),
                    'lastNotificationType', e.last_notification_type, 'lastSignedDate', \(unescaped: Self.iso("e.last_signed_date")),
                    'contradiction', e.contradiction, 'supersededBy', e.superseded_by) ORDER BY e.environment)
                    FROM entitlements_now e WHERE e.bundle_id = \(bundleId) AND e.original_transaction_id = \(originalTransactionId)),
                'transactions', (SELECT json_agg(json_build_object(
                    'transactionId', t.transaction_id, 'environment', t.environment, 'productId', t.product_id, 'type', t.type,
                    'purchaseDate', \(unescaped: Self.iso("t.purchase_date")), 'expiresDate', \(unescaped: Self.iso("t.expires_date")),
                    'revocationDate', \(unescaped: Self.iso("t.revocation_date")), 'price', t.price, 'currency', t.currency) ORDER BY t.purchase_date DESC NULLS LAST)
                    FROM transactions t WHERE t.bundle_id = \(bundleId) AND t.original_transaction_id = \(originalTransactionId))
            )::text
            """)
    }

    /// The subscriptions of a customer of `bundleId`: owned by the customer API's policy, or carrying the
    /// customer's appAccountToken where no ownership row says otherwise.
    /// The offer signatures issued to `customerId` (docs/offers.md), newest first, with the purchase that redeemed each.
    public func offerSignatures(bundleId: String, customerId: String, limit: Int = 100) async throws -> [[String: String]] {
        let rows = try await client.query(
            """
            SELECT to_char(issued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), kind, product_id, coalesce(offer_identifier, ''), nonce, rule,
                coalesce(transaction_id, ''), coalesce(redeemed_transaction_id, ''), coalesce(to_char(redeemed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), '')
            FROM offer_signatures WHERE bundle_id = \(bundleId) AND customer_id = lower(\(customerId))
            ORDER BY issued_at DESC LIMIT \(limit)
            """,
            logger: logger)
        var result: [[String: String]] = []
        for try await (issued, kind, product, offer, nonce, rule, transaction, redeemed, redeemedAt) in rows.decode(
            (String, String, String, String, String, String, String, String, String).self)
        {
            result.append([
                "issuedAt": issued, "kind": kind, "productId": product, "offer": offer, "nonce": nonce, "rule": rule, "transactionId": transaction,
                "redeemedTransactionId": redeemed, "redeemedAt": redeemedAt,
            ])
        }
        return result
    }

    public func customerSubscriptions(bundleId: String, customerId: String) async throws -> [String] {
        let rows = try await client.query(
            """
            SELECT DISTINCT original_transaction_id FROM (
                SELECT original_transaction_id FROM customer_ownership WHERE bundle_id = \(bundleId) AND customer_id = lower(\(customerId))
                UNION ALL
                SELECT e.original_transaction_id FROM entitlements e
                WHERE e.bundle_id = \(bundleId) AND e.app_account_token IS NOT NULL AND lower(e.app_account_token) = lower(\(customerId))
                    AND NOT EXISTS (SELECT 1 FROM customer_ownership c WHERE c.environment = e.environment AND c.bundle_id = e.bundle_id
                        AND c.original_transaction_id = e.original_transaction_id)
            ) s ORDER BY 1
            """,
            logger: logger)
        var ids: [String] = []
        for try await id in rows.decode(String.self) { ids.append(id) }
        return ids
    }

    /// One page of the timeline of `subscriptions` (of `bundleId`), newest first by our clock (a notification: when
    /// ingest first received it; an event: when the transaction that made it committed, so after its cause; a dead
    /// letter: when it was received; an action: when it was taken): notifications (and purchases and
    /// pulled snapshots) with their outcome and deliveries, dead letters that claim these subscriptions, entitlement
    /// events with their webhook deliveries, operator actions. `limit + 1` rows are read to know whether more follow.
    public func timeline(bundleId: String, subscriptions: [String], before cursor: TimelineCursor?, limit: Int) async throws -> (rows: [JSONValue], next: TimelineCursor?) {
        let cursorAt = cursor?.at ?? Int64.max
        let cursorId = cursor?.id ?? "~"
        // The page is chosen from cheap keys (time, id, what, which); only its rows are then read and built as JSON.
        let position = "x.original_topic || ':' || x.original_partition || ':' || x.original_offset"
        let value = try await json(
            """
            WITH subs AS (SELECT unnest(\(subscriptions)::text[]) AS id),
            keys AS (
                SELECT coalesce(n.received_at, n.stored_at) AS at, 'n' || n.notification_uuid AS id, 'n' AS kind, n.notification_uuid AS ref
                FROM notification_archive n
                WHERE n.original_transaction_id IN (SELECT id FROM subs) AND n.bundle_id = \(bundleId)
                UNION ALL
                SELECT min(coalesce(x.received_at, x.dead_lettered_at)), 'd' || min(\(unescaped: position)), 'd', coalesce(x.notification_uuid, min(\(unescaped: position)))
                FROM dead_lettered_records x
                WHERE x.original_transaction_id IN (SELECT id FROM subs) AND (x.bundle_id = \(bundleId) OR x.bundle_id IS NULL)
                GROUP BY coalesce(x.notification_uuid, \(unescaped: position)), x.notification_uuid
                UNION ALL
                SELECT o.created_at, 'e' || lpad(o.id::text, 20, '0'), 'e', o.id::text
                FROM entitlement_events_outbox o WHERE o.bundle_id = \(bundleId) AND o.original_transaction_id IN (SELECT id FROM subs)
                UNION ALL
                SELECT a.at, 'a' || lpad(a.id::text, 20, '0'), 'a', a.id::text
                FROM console_audit a WHERE a.original_transaction_id IN (SELECT id FROM subs) AND (a.bundle_id = \(bundleId) OR a.bundle_id IS NULL)
            ),
            page AS (
                SELECT * FROM keys WHERE ((extract(epoch FROM at) * 1000000)::bigint, id) < (\(cursorAt), \(cursorId)) ORDER BY at DESC, id DESC LIMIT \(limit + 1)
            )
            SELECT json_agg(json_build_object('at', (extract(epoch FROM p.at) * 1000000)::bigint, 'id', p.id, 'row', CASE p.kind
                WHEN 'n' THEN (
                    SELECT json_build_object(
                        'kind', CASE WHEN n.source = 'customer-api' THEN 'purchase'
                            WHEN n.notification_type IN (\(StatusSnapshotDocument.notificationType), \(SignedPayloadVerifier.historyTransactionType)) THEN 'snapshot'
                            ELSE 'notification' END,
                        'uuid', n.notification_uuid, 'type', n.notification_type, 'subtype', n.subtype, 'signedDate', \(unescaped: Self.iso("n.signed_date")),
                        'source', n.source, 'environment', n.environment, 'subscription', n.original_transaction_id,
                        'outcome', coalesce(l.outcome, 'applied'), 'deliveries', greatest(d.count, 1), 'traceId', n.trace_id,
                        'firstReceived', \(unescaped: Self.iso("coalesce(n.received_at, d.first, n.stored_at)")),
                        'lastReceived', \(unescaped: Self.iso("coalesce(d.last, n.received_at, n.stored_at)")))
                    FROM notification_archive n
                    JOIN notification_ledger l ON l.notification_uuid = n.notification_uuid
                    LEFT JOIN LATERAL (SELECT count(*) FILTER (WHERE NOT redriven) AS count, min(coalesce(received_at, stored_at)) AS first,
                        max(coalesce(received_at, stored_at)) AS last FROM notification_deliveries WHERE notification_uuid = n.notification_uuid) d ON true
                    WHERE n.notification_uuid = p.ref)
                WHEN 'd' THEN (
                    SELECT json_build_object(
                        'kind', 'notification', 'uuid', min(x.notification_uuid), 'type', min(x.notification_type), 'outcome', 'dead-lettered',
                        'code', min(x.error_code), 'reason', min(x.reason), 'deliveries', greatest(count(*) FILTER (WHERE NOT x.redriven), 1),
                        'traceId', min(x.trace_id),
                        'redrives', count(*) FILTER (WHERE x.redriven), 'subscription', min(x.original_transaction_id),
                        'firstReceived', \(unescaped: Self.iso("min(coalesce(x.received_at, x.dead_lettered_at))")),
                        'lastReceived', \(unescaped: Self.iso("max(coalesce(x.received_at, x.dead_lettered_at))")), 'position', min(\(unescaped: position)))
                    FROM dead_lettered_records x
                    WHERE coalesce(x.notification_uuid, \(unescaped: position)) = p.ref AND x.original_transaction_id IN (SELECT id FROM subs)
                        AND (x.bundle_id = \(bundleId) OR x.bundle_id IS NULL))
                WHEN 'e' THEN (
                    SELECT json_build_object(
                        'kind', 'event', 'eventId', o.event_id, 'type', o.event_type, 'sequence', o.sequence, 'subscription', o.original_transaction_id,
                        'time', \(unescaped: Self.iso("o.event_time")), 'published', o.published_at IS NOT NULL,
                        'before', (o.data::jsonb)->'before'->>'status', 'after', (o.data::jsonb)->'after'->>'status',
                        'offerIdentifier', (o.data::jsonb)->'offer'->>'offerIdentifier', 'offerNonce', (o.data::jsonb)->'offer'->>'nonce',
                        'offerTransaction', (o.data::jsonb)->'offer'->>'transactionId',
                        'webhooks', (SELECT json_agg(json_build_object('endpoint', w.endpoint_id, 'status', w.status, 'attempts', w.attempts,
                            'lastStatus', w.last_status, 'lastError', w.last_error) ORDER BY w.endpoint_id) FROM webhook_deliveries w WHERE w.event_id = o.event_id))
                    FROM entitlement_events_outbox o WHERE o.id = p.ref::bigint)
                ELSE (
                    SELECT json_build_object(
                        'kind', 'action', 'action', a.action, 'operator', a.operator_email, 'reason', a.reason, 'subscription', a.original_transaction_id,
                        'detail', a.detail::text, 'time', \(unescaped: Self.iso("a.at")))
                    FROM console_audit a WHERE a.id = p.ref::bigint)
                END) ORDER BY p.at DESC, p.id DESC)::text
            FROM page p
            """)
        guard case .array(let all) = value else { return ([], nil) }
        let rows = Array(all.prefix(limit))
        var next: TimelineCursor?
        if all.count > limit, let last = rows.last?.objectValue, let micro = last["at"]?.int64Value, let id = last["id"]?.stringValue {
            // The last row's (microseconds, id): the next page starts strictly after it in the order.
            next = TimelineCursor(at: micro, id: id)
        }
        return (rows.compactMap { $0.objectValue?["row"] }, next)
    }

    /// A stored notification: what it says (decoded payload, pretty), its JWS header (for the chain) and its
    /// nested JWSs, its outcome and deliveries.
    public func notification(uuid: String) async throws -> JSONValue {
        try await json(
            """
            SELECT json_build_object(
                'uuid', n.notification_uuid, 'type', n.notification_type, 'subtype', n.subtype, 'signedDate', \(unescaped: Self.iso("n.signed_date")),
                'environment', n.environment, 'bundleId', n.bundle_id, 'subscription', n.original_transaction_id, 'source', n.source,
                'outcome', coalesce(l.outcome, 'applied'), 'firstSeen', \(unescaped: Self.iso("l.first_seen_at")),
                'payload', jsonb_pretty(n.payload), 'signedPayload', n.signed_payload,
                'deliveries', (SELECT json_agg(json_build_object('position', d.kafka_topic || ':' || d.kafka_partition || ':' || d.kafka_offset,
                    'source', d.source, 'receivedAt', \(unescaped: Self.iso("d.received_at"))) ORDER BY d.kafka_partition, d.kafka_offset)
                    FROM notification_deliveries d WHERE d.notification_uuid = n.notification_uuid)
            )::text
            FROM notifications n JOIN notification_ledger l ON l.notification_uuid = n.notification_uuid
            WHERE n.notification_uuid = \(uuid)
            """)
    }

    /// Dead letters, newest first, filtered by reason code, app (the claimed bundle id) and time, or a claimed
    /// identifier; payloads included (the page escapes them).
    public func deadLetters(code: String?, bundleId: String?, since: Date?, term: String?, limit: Int) async throws -> JSONValue {
        try await json(
            """
            SELECT json_build_object(
                'rows', (SELECT json_agg(r ORDER BY r.at DESC) FROM (
                    SELECT x.dead_lettered_at AS at, x.original_topic || ':' || x.original_partition || ':' || x.original_offset AS position,
                        x.error_code AS code, x.reason, x.notification_uuid AS uuid, x.notification_type AS type, x.bundle_id AS bundle,
                        x.original_transaction_id AS subscription, \(unescaped: Self.iso("x.dead_lettered_at")) AS time, x.payload
                    FROM dead_lettered_records x
                    WHERE (\(code)::text IS NULL OR x.error_code = \(code)) AND (\(bundleId)::text IS NULL OR x.bundle_id = \(bundleId))
                        AND (\(since)::timestamptz IS NULL OR x.dead_lettered_at >= \(since))
                        AND (\(term)::text IS NULL OR x.notification_uuid = \(term) OR x.original_transaction_id = \(term))
                    ORDER BY x.dead_lettered_at DESC LIMIT \(limit)) r),
                'codes', (SELECT json_agg(json_build_object('code', error_code, 'count', n) ORDER BY n DESC) FROM (
                    SELECT error_code, count(*) AS n FROM dead_lettered_records GROUP BY error_code) c)
            )::text
            """)
    }

    /// The stored dead letters at these original positions (`topic:partition:offset`), with what a re-drive needs:
    /// the payload, the key it was produced under (the subscription it claims), and, for dead letters recorded since
    /// migration 20, the dead letter's own position and headers (`RedriveRecord` builds the same record from them as
    /// `pipelinectl dlq redrive` does from the topic).
    public func deadLetterPayloads(_ positions: [String]) async throws -> [StoredDeadLetter] {
        let rows = try await client.query(
            """
            SELECT x.original_topic || ':' || x.original_partition || ':' || x.original_offset, x.bundle_id, x.original_transaction_id, x.payload,
                x.traceparent, x.error_code, x.dead_letter_topic, x.dead_letter_partition, x.dead_letter_offset, x.dead_letter_headers::text
            FROM dead_lettered_records x
            WHERE x.original_topic || ':' || x.original_partition || ':' || x.original_offset = ANY(\(positions)::text[]) AND x.payload IS NOT NULL
            """,
            logger: logger)
        var found: [StoredDeadLetter] = []
        for try await (position, bundle, key, payload, traceparent, code, topic, partition, offset, headers) in rows.decode(
            (String, String?, String?, String, String?, String, String?, Int32?, Int64?, String?).self)
        {
            var letter = StoredDeadLetter(position: position, bundleId: bundle, key: key, payload: payload, traceparent: traceparent, errorCode: code)
            if let topic, let partition, let offset { letter.deadLetterPosition = RecordPosition(topic: topic, partition: partition, offset: offset) }
            if let headers, case .array(let items)? = try? StrictJSONParser(maximumDepth: 4).parse(Array(headers.utf8)) {
                letter.deadLetterHeaders = items.compactMap { item in
                    guard let object = item.objectValue, let key = object["k"]?.stringValue else { return nil }
                    return StoredHeader(key: key, value: object["v"]?.stringValue.flatMap { Base64.decode($0, alphabet: .standard) })
                }
            }
            found.append(letter)
        }
        return found
    }

    /// The webhook endpoints, for the re-send action's choice.
    public func webhookEndpoints() async throws -> [(id: String, url: String)] {
        var endpoints: [(String, String)] = []
        for try await row in try await client.query("SELECT id, url FROM webhook_endpoints ORDER BY id", logger: logger).decode((String, String).self) {
            endpoints.append(row)
        }
        return endpoints
    }

    /// Sends a subscription's events to an endpoint again: the endpoint's deliveries of them go back to pending with
    /// their attempts reset and their lease dropped (a late answer of an attempt in flight is fenced), so the
    /// webhooks service sends them again, oldest first. Events the endpoint has no delivery of (added later, or its
    /// filters left them out) are not created here: `pipelinectl webhooks replay` reads those from the events topic.
    public func resendWebhooks(endpointId: String, bundleId: String, originalTransactionId: String) async throws -> Int {
        let rows = try await client.query(
            """
            UPDATE webhook_deliveries w SET status = 'pending', attempts = 0, next_attempt_at = now(), leased_until = NULL, lease_token = NULL, finished_at = NULL
            FROM entitlement_events_outbox o
            WHERE w.endpoint_id = \(endpointId) AND w.event_id = o.event_id AND o.bundle_id = \(bundleId) AND o.original_transaction_id = \(originalTransactionId)
            RETURNING w.id
            """,
            logger: logger)
        var count = 0
        for try await _ in rows.decode(Int64.self) { count += 1 }
        return count
    }

    /// SQL for `column` as ISO 8601 UTC with milliseconds (null stays null).
    static func iso(_ column: String) -> String {
        "to_char((\(column)) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
    }
}

/// A dead letter as PostgreSQL keeps it, for the console's re-drive.
public struct StoredDeadLetter: Sendable {
    /// The original record's position, `topic:partition:offset`.
    public var position: String
    public var bundleId: String?
    public var key: String?
    public var payload: String
    public var traceparent: String?
    public var errorCode: String
    public var deadLetterPosition: RecordPosition?
    public var deadLetterHeaders: [StoredHeader] = []

    /// What it claims, for the erasure screen.
    public var erasureClaim: ErasureClaim? {
        var record = DeadLetteredRecord(position: RecordPosition(topic: "", partition: 0, offset: 0), errorCode: errorCode, payload: Array(payload.utf8))
        if let bundleId { record.claims.bundleId = bundleId }
        return record.erasureClaim
    }
}
