import AppStoreNotifications
import EntitlementStore
import Foundation
import Logging
import PostgresNIO

/// A registered endpoint (`webhook_endpoints`).
package struct WebhookEndpoint: Sendable, Hashable {
    package var id: String
    package var url: String
    package var description: String?
    /// Empty: every app.
    package var bundleIds: [String]
    /// Nil: both environments.
    package var environment: String?
    /// Empty: every type.
    package var eventTypes: [String]
    package var allowHTTP: Bool
    package var secret: String
    package var previousSecret: String?
    package var previousSecretUntil: Date?
    package var enabled: Bool
    package var disabledReason: String?
    package var deadInARow: Int
    package var createdAt: Date

    package init(
        id: String, url: String, description: String?, bundleIds: [String], environment: String?, eventTypes: [String], allowHTTP: Bool, secret: String,
        previousSecret: String? = nil, previousSecretUntil: Date? = nil, enabled: Bool = true, disabledReason: String? = nil, deadInARow: Int = 0,
        createdAt: Date = Date()
    ) {
        self.id = id
        self.url = url
        self.description = description
        self.bundleIds = bundleIds
        self.environment = environment
        self.eventTypes = eventTypes
        self.allowHTTP = allowHTTP
        self.secret = secret
        self.previousSecret = previousSecret
        self.previousSecretUntil = previousSecretUntil
        self.enabled = enabled
        self.disabledReason = disabledReason
        self.deadInARow = deadInARow
        self.createdAt = createdAt
    }

    /// Whether the endpoint wants `event` (its filters: apps, environment, types).
    package func wants(_ event: WebhookEvent) -> Bool {
        (bundleIds.isEmpty || event.bundleId.map(bundleIds.contains) == true) && (environment == nil || event.environment == environment)
            && (eventTypes.isEmpty || eventTypes.contains(event.type))
    }

    /// The secrets that sign now: the current one, and the previous one while the rotation's overlap lasts.
    package func signingSecrets(at now: Date = Date()) -> [String] {
        if let previousSecret, let until = previousSecretUntil, until > now { return [secret, previousSecret] }
        return [secret]
    }
}

/// One entitlement event as the webhooks service takes it from the events topic.
package struct WebhookEvent: Sendable, Hashable {
    package var id: String
    package var type: String
    package var subject: String
    package var time: Date
    package var bundleId: String?
    package var environment: String?
    package var partition: Int32
    package var offset: Int64
    /// The CloudEvents structured form (attributes and `data` in one object): what is POSTed.
    package var body: String
    /// The event record's trace context (the relay's send span), when tracing was on: its deliveries' attempts
    /// continue that trace.
    package var traceparent: String?

    package init(id: String, type: String, subject: String, time: Date, bundleId: String?, environment: String?, partition: Int32, offset: Int64, body: String) {
        self.id = id
        self.type = type
        self.subject = subject
        self.time = time
        self.bundleId = bundleId
        self.environment = environment
        self.partition = partition
        self.offset = offset
        self.body = body
    }
}

/// A delivery claimed for an attempt, with what is needed to send it.
package struct DueDelivery: Sendable, Hashable {
    package var id: Int64
    package var endpointId: String
    package var eventId: String
    package var body: String
    package var attempts: Int
    package var url: String
    package var allowHTTP: Bool
    package var secrets: [String]
    /// The claim's token: the attempt's outcome is recorded only while the delivery still carries it (fencing), so
    /// an attempt that outlived its lease can neither move the row nor count twice.
    package var leaseToken: UUID
    /// The event's trace context, when tracing was on.
    package var traceparent: String?
}

/// A row of the delivery log, for `pipelinectl webhooks deliveries`.
package struct DeliveryLogRow: Sendable, Hashable {
    package var id: Int64
    package var eventId: String
    package var eventType: String
    package var subject: String
    package var status: String
    package var attempts: Int
    package var lastStatus: Int?
    package var lastError: String?
    package var lastLatencyMilliseconds: Int?
    package var responseExcerpt: String?
    package var createdAt: Date
    package var nextAttemptAt: Date
}

/// What to do after an attempt.
package enum DeliveryOutcome: Sendable, Hashable {
    case delivered
    case retry(at: Date)
    /// 410 Gone (Standard Webhooks: the receiver asks never to be sent again): the endpoint is disabled at once with
    /// this reason; the delivery waits, pending, for an operator's `enable` (or `remove`).
    case gone(reason: String)
    /// The schedule is exhausted: the delivery is kept as dead; after `disableAfter` dead ones in a row the
    /// endpoint is disabled with a reason.
    case dead(disableAfter: Int)

    /// The `outcome` label of `webhooks_attempts_total`.
    package var label: String {
        switch self {
        case .delivered: "delivered"
        case .retry: "retry"
        case .gone: "gone"
        case .dead: "dead"
        }
    }
}

/// The webhooks' tables: endpoints, deliveries (one per endpoint and event, in topic order) and attempts.
package struct WebhookStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    /// `ERASURE_KEY_FILE`: events about an erased customer dated before the erasure make no delivery, even when
    /// their outbox row was pruned before the erasure (so `erased_events` never learnt their ids) and a replay or a
    /// rewind of the events topic reads them again. Required once erasures exist (`ErasureFailure.keyMissing`).
    package let erasureKey: ErasureKey?
    /// The months of the deliveries' and attempts' partitions this store has seen exist (by the event's time).
    let partitions = TimePartitions()

    package init(client: PostgresClient, logger: Logger, erasureKey: ErasureKey? = nil) {
        self.client = client
        self.logger = logger
        self.erasureKey = erasureKey
    }

    // MARK: - Endpoints

    static let endpointColumns = """
        id, url, description, bundle_ids, environment, event_types, allow_http, secret, previous_secret, previous_secret_until, enabled, disabled_reason,
        dead_in_a_row, created_at
        """

    package func addEndpoint(_ endpoint: WebhookEndpoint) async throws {
        try await client.query(
            """
            INSERT INTO webhook_endpoints (id, url, description, bundle_ids, environment, event_types, allow_http, secret)
            VALUES (\(endpoint.id), \(endpoint.url), \(endpoint.description), \(endpoint.bundleIds), \(endpoint.environment), \(endpoint.eventTypes),
                \(endpoint.allowHTTP), \(endpoint.secret))
            """,
            logger: logger)
    }

    package func endpoints() async throws -> [WebhookEndpoint] {
        try await selectEndpoints(PostgresQuery(unsafeSQL: "SELECT \(Self.endpointColumns) FROM webhook_endpoints ORDER BY created_at, id"))
    }

    package func endpoint(id: String) async throws -> WebhookEndpoint? {
        var query = PostgresQuery(unsafeSQL: "SELECT \(Self.endpointColumns) FROM webhook_endpoints WHERE id = $1")
        query.binds.append(id)
        return try await selectEndpoints(query).first
    }

    private func selectEndpoints(_ query: PostgresQuery) async throws -> [WebhookEndpoint] {
        var endpoints: [WebhookEndpoint] = []
        let rows = try await client.query(query, logger: logger)
        for try await (id, url, description, bundleIds, environment, eventTypes, allowHTTP, secret, previous, until, enabled, reason, dead, created) in rows.decode(
            (String, String, String?, [String], String?, [String], Bool, String, String?, Date?, Bool, String?, Int, Date).self)
        {
            endpoints.append(WebhookEndpoint(
                id: id, url: url, description: description, bundleIds: bundleIds, environment: environment, eventTypes: eventTypes, allowHTTP: allowHTTP,
                secret: secret, previousSecret: previous, previousSecretUntil: until, enabled: enabled, disabledReason: reason, deadInARow: dead,
                createdAt: created))
        }
        return endpoints
    }

    /// Enables (clearing the reason and the run of dead deliveries) or disables an endpoint; false when none has `id`.
    package func setEnabled(id: String, enabled: Bool, reason: String?) async throws -> Bool {
        let rows = try await client.query(
            """
            UPDATE webhook_endpoints SET enabled = \(enabled), disabled_reason = \(enabled ? nil : reason),
                dead_in_a_row = CASE WHEN \(enabled) THEN 0 ELSE dead_in_a_row END
            WHERE id = \(id) RETURNING id
            """,
            logger: logger)
        for try await _ in rows.decode(String.self) { return true }
        return false
    }

    /// A new signing secret; the old one keeps signing until `overlapUntil`.
    package func rotateSecret(id: String, newSecret: String, overlapUntil: Date) async throws -> Bool {
        let rows = try await client.query(
            """
            UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_until = \(overlapUntil), secret = \(newSecret)
            WHERE id = \(id) RETURNING id
            """,
            logger: logger)
        for try await _ in rows.decode(String.self) { return true }
        return false
    }

    /// Removes an endpoint with its deliveries and their attempts.
    package func removeEndpoint(id: String) async throws -> Bool {
        // The deliveries go by the endpoint's foreign key; their attempts have none (migration 28), so they go first.
        let rows = try await client.query(
            """
            WITH attempts AS (
                DELETE FROM webhook_attempts a USING webhook_deliveries d
                WHERE d.endpoint_id = \(id) AND a.delivery_id = d.id AND a.subject = d.subject AND a.event_time = d.event_time
            )
            DELETE FROM webhook_endpoints WHERE id = \(id) RETURNING id
            """, logger: logger)
        for try await _ in rows.decode(String.self) { return true }
        return false
    }

    // MARK: - Deliveries

    /// One pending delivery per endpoint that wants each event, enabled or not: a disabled endpoint's deliveries
    /// wait for `enable` (only `remove` drops them); an event already taken for an endpoint (a redelivered batch)
    /// is left as it is. Returns how many were created.
    @discardableResult
    package func enqueue(_ events: [WebhookEvent], endpoints: [WebhookEndpoint]) async throws -> Int {
        var rows: [JSONValue] = []
        for event in events {
            for endpoint in endpoints where endpoint.wants(event) {
                rows.append(.object(JSONObject([
                    "endpoint_id": .string(endpoint.id), "event_id": .string(event.id), "event_type": .string(event.type), "subject": .string(event.subject),
                    "event_time": .number(JSONNumber(Int64(event.time.timeIntervalSince1970 * 1000))), "kafka_partition": .number(JSONNumber(Int64(event.partition))),
                    "kafka_offset": .number(JSONNumber(event.offset)), "body": .string(event.body),
                    "traceparent": event.traceparent.map(JSONValue.string) ?? .null,
                ])))
            }
        }
        guard !rows.isEmpty else { return 0 }
        let payload = JSONValue.array(rows).serialized
        // The months of the events' times in both tables (migration 28), outside the transaction; a month
        // retention dropped since this store saw it is made again and the insert tried once more.
        let months = events.map { Int64($0.time.timeIntervalSince1970 * 1000) }
        try await partitions.ensure(tables: TimePartitions.webhookTables, period: .month, instants: months, client: client, logger: logger)
        do {
            return try await insertDeliveries(rows: rows, payload: payload, events: events)
        } catch where TimePartitions.isMissingPartition(error) {
            partitions.forget()
            try await partitions.ensure(tables: TimePartitions.webhookTables, period: .month, instants: months, client: client, logger: logger)
            return try await insertDeliveries(rows: rows, payload: payload, events: events)
        }
    }

    func insertDeliveries(rows: [JSONValue], payload: String, events: [WebhookEvent]) async throws -> Int {
        // An event of an erased customer read from the topic after the erasure makes no delivery (`erased_events`);
        // the erasure lock shared makes "after" exact: an erasure running now waits for this insert, then deletes it.
        return try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock_shared(\(ErasureLock.advisoryKey))", logger: logger)
            // The suppression list too: an event whose subscription (or app transaction) was erased after the event.
            let claims = events.map { event in
                event.bundleId.map { bundleId in
                    ErasureClaim(
                        bundleId: bundleId,
                        identifiers: [ErasedIdentifier(.originalTransactionId, bundleId: bundleId, value: event.subject), ErasedIdentifier(.appTransactionId, bundleId: bundleId, value: event.subject)],
                        time: event.time)
                }
            }
            let erased = try await EntitlementStore(client: client, logger: logger, erasureKey: erasureKey).erased(claims, on: connection)
            let erasedIds = Set(erased.map { events[$0].id })
            let kept = erasedIds.isEmpty ? payload : JSONValue.array(rows.filter { row in
                guard case .object(let object) = row, let id = object["event_id"]?.stringValue else { return true }
                return !erasedIds.contains(id)
            }).serialized
            let inserted = try await connection.query(
                """
                INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, subject, event_time, kafka_partition, kafka_offset, body, traceparent)
                SELECT r.endpoint_id, r.event_id, r.event_type, r.subject, to_timestamp(r.event_time / 1000.0), r.kafka_partition, r.kafka_offset, r.body,
                    r.traceparent
                FROM jsonb_to_recordset(\(kept)::jsonb) AS r(endpoint_id text, event_id text, event_type text, subject text, event_time bigint,
                    kafka_partition int, kafka_offset bigint, body text, traceparent text)
                WHERE NOT EXISTS (SELECT 1 FROM erased_events e WHERE e.event_id = r.event_id)
                ON CONFLICT DO NOTHING
                RETURNING id
                """,
                logger: logger)
            var count = 0
            for try await _ in inserted.decode(Int64.self) { count += 1 }
            return count
        }
    }

    /// Claims up to `limit` deliveries that are due, each the oldest pending delivery of its (endpoint,
    /// subscription) by topic position, for `lease` (a process killed mid-attempt leaves it to be claimed again
    /// once the lease ends). `SKIP LOCKED`: several webhooks processes claim disjoint deliveries. Since only a
    /// chain's head is ever claimed, a subscription's deliveries to one endpoint are attempted one at a time, in order.
    package func claimDue(limit: Int, lease: Duration, perEndpoint: Int) async throws -> [DueDelivery] {
        let leaseSeconds = Double(lease.components.seconds) + Double(lease.components.attoseconds) / 1e18
        // Candidates: chain heads that are due, ranked per endpoint, so that with what the endpoint already has
        // in flight (leased, any process) it never gets more than `perEndpoint`. The locking SELECT repeats the
        // lease condition: PostgreSQL re-checks it on a row another process claimed meanwhile, and skips it.
        // What is in flight is counted once per endpoint (`in_flight`), not once per candidate: a correlated
        // count there scanned the endpoint's whole backlog for each of its rows, and with 7 800 pending deliveries
        // (the chaos run's backlog after a webhooks kill) one lease query took 22 s instead of 44 ms. The re-check
        // includes `next_attempt_at`: a row another process attempted and scheduled for later while this query ran
        // is not due, and was once sent again within milliseconds without it.
        let rows = try await client.query(
            """
            WITH in_flight AS (
                SELECT endpoint_id, count(*) AS leased FROM webhook_deliveries
                WHERE status = 'pending' AND leased_until > now() GROUP BY endpoint_id
            ), candidates AS (
                SELECT d.id, row_number() OVER (PARTITION BY d.endpoint_id ORDER BY d.next_attempt_at, d.id) AS rank,
                    coalesce(f.leased, 0) AS in_flight
                FROM webhook_deliveries d
                JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled
                LEFT JOIN in_flight f ON f.endpoint_id = d.endpoint_id
                WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND (d.leased_until IS NULL OR d.leased_until < now())
                    AND NOT EXISTS (
                        SELECT 1 FROM webhook_deliveries earlier
                        WHERE earlier.status = 'pending' AND earlier.endpoint_id = d.endpoint_id AND earlier.subject = d.subject
                            AND (earlier.kafka_partition, earlier.kafka_offset) < (d.kafka_partition, d.kafka_offset))
            ), chosen AS (
                SELECT d.id FROM webhook_deliveries d
                WHERE d.id IN (SELECT id FROM candidates WHERE rank + in_flight <= \(perEndpoint))
                    AND d.status = 'pending' AND d.next_attempt_at <= now() AND (d.leased_until IS NULL OR d.leased_until < now())
                ORDER BY d.next_attempt_at, d.id
                LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            )
            UPDATE webhook_deliveries d SET leased_until = now() + make_interval(secs => \(leaseSeconds)), lease_token = gen_random_uuid()
            FROM chosen, webhook_endpoints e
            WHERE d.id = chosen.id AND e.id = d.endpoint_id
            RETURNING d.id, d.endpoint_id, d.event_id, d.body, d.attempts, e.url, e.allow_http, e.secret, e.previous_secret, e.previous_secret_until, d.lease_token,
                d.traceparent
            """,
            logger: logger)
        var due: [DueDelivery] = []
        let now = Date()
        for try await (id, endpointId, eventId, body, attempts, url, allowHTTP, secret, previous, until, token, traceparent) in rows.decode(
            (Int64, String, String, String, Int, String, Bool, String, String?, Date?, UUID, String?).self)
        {
            let secrets = previous.flatMap { previous in until.map { $0 > now ? [secret, previous] : [secret] } } ?? [secret]
            due.append(DueDelivery(
                id: id, endpointId: endpointId, eventId: eventId, body: body, attempts: attempts, url: url, allowHTTP: allowHTTP, secrets: secrets, leaseToken: token,
                traceparent: traceparent))
        }
        return due
    }

    /// Records an attempt in the log and moves the delivery on, only while the delivery still carries the claim's
    /// lease token (fenced): an attempt that lost its lease (its process stalled past it, another claimed the row)
    /// changes nothing and returns false, so a late answer never moves a delivered row back to pending and never
    /// counts twice. A dead delivery counts toward disabling its endpoint, a delivered one ends the endpoint's run
    /// of dead ones, a 410 disables the endpoint at once.
    @discardableResult
    package func record(_ attempt: WebhookAttempt, of delivery: DueDelivery, outcome: DeliveryOutcome) async throws -> Bool {
        let error = attempt.error.map { UntrustedText.escaped($0, limit: 300) }
        let excerpt = attempt.responseExcerpt.map { UntrustedText.escaped($0, limit: 2_000) }
        return try await client.withTransaction(logger: logger) { connection in
            let status: String
            var nextAttempt = Date()
            switch outcome {
            case .delivered: status = "delivered"
            case .retry(let at): status = "pending"; nextAttempt = at
            case .gone: status = "pending"
            case .dead: status = "dead"
            }
            let moved = try await connection.query(
                """
                UPDATE webhook_deliveries SET status = \(status), attempts = attempts + 1, next_attempt_at = \(nextAttempt), leased_until = NULL, lease_token = NULL,
                    last_status = \(attempt.status), last_error = \(error), last_latency_ms = \(attempt.latencyMilliseconds), response_excerpt = \(excerpt),
                    finished_at = CASE WHEN \(status) = 'pending' THEN NULL ELSE now() END
                WHERE id = \(delivery.id) AND lease_token = \(delivery.leaseToken) AND status = 'pending'
                RETURNING subject, event_time
                """,
                logger: logger)
            var delivered: (subject: String, eventTime: Date)?
            for try await (subject, eventTime) in moved.decode((String, Date).self) { delivered = (subject, eventTime) }
            guard let (subject, eventTime) = delivered else { return false }
            // In the delivery's month (its event's time), which its insert made.
            try await connection.query(
                """
                INSERT INTO webhook_attempts (delivery_id, subject, event_time, status, latency_ms, error, response_excerpt, trace_id)
                VALUES (\(delivery.id), \(subject), \(eventTime), \(attempt.status), \(attempt.latencyMilliseconds), \(error), \(excerpt), \(attempt.traceId))
                """,
                logger: logger)
            switch outcome {
            case .delivered:
                try await connection.query("UPDATE webhook_endpoints SET dead_in_a_row = 0 WHERE id = \(delivery.endpointId) AND dead_in_a_row <> 0", logger: logger)
            case .gone(let reason):
                try await connection.query(
                    "UPDATE webhook_endpoints SET enabled = false, disabled_reason = \(reason) WHERE id = \(delivery.endpointId) AND enabled", logger: logger)
            case .dead(let disableAfter):
                let reason = "disabled after \(disableAfter) dead deliveries in a row; the last: \(attempt.status.map { "HTTP \($0)" } ?? error ?? "no answer")"
                try await connection.query(
                    """
                    UPDATE webhook_endpoints SET dead_in_a_row = dead_in_a_row + 1,
                        enabled = CASE WHEN dead_in_a_row + 1 >= \(disableAfter) THEN false ELSE enabled END,
                        disabled_reason = CASE WHEN dead_in_a_row + 1 >= \(disableAfter) THEN \(reason) ELSE disabled_reason END
                    WHERE id = \(delivery.endpointId)
                    """,
                    logger: logger)
            case .retry:
                break
            }
            return true
        }
    }

    /// Makes `events` pending again for `endpoint` (replay): the same ids, delivered again in topic order, whatever
    /// their earlier outcome, each with the whole retry schedule ahead of it (attempts back to 0). The caller picks
    /// only events the endpoint's filters want. Returns how many.
    package func replay(_ events: [WebhookEvent], endpoint: WebhookEndpoint) async throws -> Int {
        guard !events.isEmpty else { return 0 }
        try await enqueue(events, endpoints: [endpoint])
        let rows = try await client.query(
            """
            UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = now(), leased_until = NULL, lease_token = NULL, finished_at = NULL
            WHERE endpoint_id = \(endpoint.id) AND event_id = ANY(\(events.map(\.id))::text[]) RETURNING id
            """,
            logger: logger)
        var count = 0
        for try await _ in rows.decode(Int64.self) { count += 1 }
        return count
    }

    /// The delivery log of an endpoint, newest first.
    package func deliveries(endpointId: String, failedOnly: Bool, limit: Int) async throws -> [DeliveryLogRow] {
        let rows = try await client.query(
            """
            SELECT id, event_id, event_type, subject, status, attempts, last_status, last_error, last_latency_ms, response_excerpt, created_at, next_attempt_at
            FROM webhook_deliveries
            WHERE endpoint_id = \(endpointId) AND (NOT \(failedOnly) OR status = 'dead' OR (status = 'pending' AND attempts > 0))
            ORDER BY id DESC LIMIT \(limit)
            """,
            logger: logger)
        var log: [DeliveryLogRow] = []
        for try await (id, eventId, type, subject, status, attempts, lastStatus, lastError, latency, excerpt, created, next) in rows.decode(
            (Int64, String, String, String, String, Int, Int?, String?, Int?, String?, Date, Date).self)
        {
            log.append(DeliveryLogRow(
                id: id, eventId: eventId, eventType: type, subject: subject, status: status, attempts: attempts, lastStatus: lastStatus, lastError: lastError,
                lastLatencyMilliseconds: latency, responseExcerpt: excerpt, createdAt: created, nextAttemptAt: next))
        }
        return log
    }

    /// What the backlog gauges show of one endpoint.
    package struct Backlog: Sendable, Hashable {
        /// The age in seconds of its oldest undelivered (pending) delivery; 0 when none waits.
        package var oldestAge: Double
        /// How many deliveries wait.
        package var waiting: Int
        package var enabled: Bool
    }

    /// Every endpoint's backlog, disabled ones included (their deliveries wait for `enable`).
    package func backlogs() async throws -> [String: Backlog] {
        let rows = try await client.query(
            """
            SELECT e.id, coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::float8, count(d.id)::int8, e.enabled
            FROM webhook_endpoints e LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id AND d.status = 'pending'
            GROUP BY e.id
            """,
            logger: logger)
        var backlogs: [String: Backlog] = [:]
        for try await (id, age, waiting, enabled) in rows.decode((String, Double, Int64, Bool).self) {
            backlogs[id] = Backlog(oldestAge: age, waiting: Int(waiting), enabled: enabled)
        }
        return backlogs
    }

    /// Deletes finished deliveries (and their attempts) older than `retention`. Returns how many.
    package func prune(olderThan retention: Duration) async throws -> Int {
        let rows = try await client.query(
            """
            WITH gone AS (
                DELETE FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < now() - make_interval(secs => \(Double(retention.components.seconds)))
                RETURNING id, subject, event_time
            ), attempts AS (
                DELETE FROM webhook_attempts a USING gone WHERE a.delivery_id = gone.id AND a.subject = gone.subject AND a.event_time = gone.event_time
            )
            SELECT id FROM gone
            """,
            logger: logger)
        var count = 0
        for try await _ in rows.decode(Int64.self) { count += 1 }
        return count
    }
}

