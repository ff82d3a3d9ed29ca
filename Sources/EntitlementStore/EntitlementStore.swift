import AppStoreNotifications
import Foundation
import Logging
import PostgresNIO

/// A verified notification ready to be stored, with where it came from.
public struct StoredNotification: Sendable {
    public var verified: VerifiedNotification
    /// The raw JWS, archived as received.
    public var signedPayload: String
    public var kafkaTopic: String?
    public var kafkaPartition: Int32?
    public var kafkaOffset: Int64?
    public var receivedAt: Timestamp?

    public init(verified: VerifiedNotification, signedPayload: String, kafkaTopic: String? = nil, kafkaPartition: Int32? = nil, kafkaOffset: Int64? = nil, receivedAt: Timestamp? = nil) {
        self.verified = verified
        self.signedPayload = signedPayload
        self.kafkaTopic = kafkaTopic
        self.kafkaPartition = kafkaPartition
        self.kafkaOffset = kafkaOffset
        self.receivedAt = receivedAt
    }

    /// The dedupe key: Apple's notificationUUID (resent unchanged on retries).
    public var deduplicationKey: String {
        verified.payload.notificationUUID ?? "payload:" + Hex.encode(Array(signedPayload.utf8).suffix(86))
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

    public init(applied: Int = 0, duplicates: Int = 0, entitlementsUpdated: Int = 0, stale: Int = 0) {
        self.applied = applied
        self.duplicates = duplicates
        self.entitlementsUpdated = entitlementsUpdated
        self.stale = stale
    }
}

/// PostgreSQL persistence of verified notifications: migrations, the dedupe ledger, the archive, transactions and
/// entitlements. Every batch is one database transaction, so a batch is either entirely durable (and its Kafka
/// offsets may move) or not at all (and it is redelivered).
public struct EntitlementStore: Sendable {
    public let client: PostgresClient
    let logger: Logger

    /// `client` must be running (its `run()` inside the process's ServiceGroup) before the first call.
    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Applies every migration not applied yet, under an advisory lock. Returns the versions it applied.
    @discardableResult
    public func migrate() async throws -> [Int] {
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
            for migration in Migrations.all where !applied.contains(migration.version) {
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
    public func store(_ batch: [StoredNotification]) async throws -> BatchOutcome {
        guard !batch.isEmpty else { return BatchOutcome() }
        return try await client.withTransaction(logger: logger) { connection in
            var outcome = BatchOutcome()
            // 1. Dedupe ledger: one multi-row insert; what comes back is new.
            let keys = batch.map(\.deduplicationKey)
            var fresh: Set<String> = []
            let inserted = try await connection.query(
                "INSERT INTO notification_ledger (notification_uuid) SELECT DISTINCT unnest(\(keys)::text[]) ON CONFLICT DO NOTHING RETURNING notification_uuid",
                logger: logger)
            for try await key in inserted.decode(String.self) { fresh.insert(key) }

            var entitlements: [EntitlementKey: EntitlementState?] = [:]
            for record in batch {
                // A key is applied once: the first occurrence if it is new, never again.
                guard fresh.remove(record.deduplicationKey) != nil else {
                    outcome.duplicates += 1
                    continue
                }
                outcome.applied += 1
                try await archive(record, on: connection)
                if let transaction = record.verified.transactionInfo {
                    try await upsertTransaction(transaction, of: record.verified, on: connection)
                }
                guard let transaction = record.verified.transactionInfo?.model, let originalTransactionId = transaction.originalTransactionId else { continue }
                let key = EntitlementKey(environment: record.verified.environment.rawValue, bundleId: record.verified.bundleId, originalTransactionId: originalTransactionId)
                if entitlements[key] == nil { entitlements[key] = .some(try await lockedEntitlement(key, on: connection)) }
                switch EntitlementTransition.apply(record.verified, to: entitlements[key] ?? nil) {
                case .updated(let state):
                    entitlements[key] = .some(state)
                    try await upsertEntitlement(state, on: connection)
                    outcome.entitlementsUpdated += 1
                case .stale:
                    outcome.stale += 1
                case .notApplicable:
                    break
                }
            }
            return outcome
        }
    }

    struct EntitlementKey: Hashable {
        var environment: String
        var bundleId: String
        var originalTransactionId: String
    }

    /// The current row, locked until the transaction ends (so two workers never interleave on one subscription).
    func lockedEntitlement(_ key: EntitlementKey, on connection: PostgresConnection) async throws -> EntitlementState? {
        let rows = try await connection.query(
            "SELECT state::text FROM entitlements WHERE environment = \(key.environment) AND bundle_id = \(key.bundleId) AND original_transaction_id = \(key.originalTransactionId) FOR UPDATE",
            logger: logger)
        for try await text in rows.decode(String.self) {
            return try JSONDecoder().decode(EntitlementState.self, from: Data(text.utf8))
        }
        return nil
    }

    func archive(_ record: StoredNotification, on connection: PostgresConnection) async throws {
        let verified = record.verified
        try await connection.query(
            """
            INSERT INTO notifications (notification_uuid, notification_type, subtype, signed_date, environment, bundle_id,
                original_transaction_id, signed_payload, payload, kafka_topic, kafka_partition, kafka_offset, received_at)
            VALUES (\(record.deduplicationKey), \(verified.payload.rawNotificationType ?? ""), \(verified.payload.rawSubtype),
                \(verified.signedDate.date), \(verified.environment.rawValue), \(verified.bundleId),
                \(verified.transactionInfo?.model.originalTransactionId), \(record.signedPayload), \(verified.json.serialized)::jsonb,
                \(record.kafkaTopic), \(record.kafkaPartition), \(record.kafkaOffset), \(record.receivedAt?.date))
            ON CONFLICT (notification_uuid) DO NOTHING
            """,
            logger: logger)
    }

    func upsertTransaction(_ transaction: VerifiedPayload<JWSTransactionDecodedPayload>, of notification: VerifiedNotification, on connection: PostgresConnection) async throws {
        let t = transaction.model
        guard let transactionId = t.transactionId, let originalTransactionId = t.originalTransactionId else { return }
        try await connection.query(
            """
            INSERT INTO transactions (transaction_id, original_transaction_id, environment, bundle_id, product_id, type, purchase_date,
                expires_date, quantity, revocation_date, revocation_reason, revocation_type, price, currency, app_account_token,
                ownership_type, signed_date, payload)
            VALUES (\(transactionId), \(originalTransactionId), \(notification.environment.rawValue), \(notification.bundleId), \(t.productId),
                \(t.rawType), \(t.purchaseDate?.date), \(t.expiresDate?.date), \(t.quantity.map(Int.init)), \(t.revocationDate?.date),
                \(t.rawRevocationReason.map(Int.init)), \(t.rawRevocationType), \(t.price), \(t.currency), \(t.appAccountToken),
                \(t.rawInAppOwnershipType), \(transaction.signedDate.date), \(transaction.json.serialized)::jsonb)
            ON CONFLICT (transaction_id) DO UPDATE SET
                product_id = EXCLUDED.product_id, type = EXCLUDED.type, purchase_date = EXCLUDED.purchase_date,
                expires_date = EXCLUDED.expires_date, quantity = EXCLUDED.quantity, revocation_date = EXCLUDED.revocation_date,
                revocation_reason = EXCLUDED.revocation_reason, revocation_type = EXCLUDED.revocation_type, price = EXCLUDED.price,
                currency = EXCLUDED.currency, app_account_token = EXCLUDED.app_account_token, ownership_type = EXCLUDED.ownership_type,
                signed_date = EXCLUDED.signed_date, payload = EXCLUDED.payload
            WHERE transactions.signed_date < EXCLUDED.signed_date
            """,
            logger: logger)
    }

    func upsertEntitlement(_ s: EntitlementState, on connection: PostgresConnection) async throws {
        let state = String(decoding: try JSONEncoder().encode(s), as: UTF8.self)
        try await connection.query(
            """
            INSERT INTO entitlements (environment, bundle_id, original_transaction_id, product_id, subscription_group_id, status,
                expires_at, grace_period_expires_at, auto_renew_status, auto_renew_product_id, billing_issue_since, revocation_date,
                revocation_reason, revocation_type, ownership_type, offer_type, offer_identifier, offer_discount_type,
                app_account_token, price, currency, last_notification_type, last_notification_subtype, last_signed_date,
                apple_status, state, updated_at)
            VALUES (\(s.environment), \(s.bundleId), \(s.originalTransactionId), \(s.productId), \(s.subscriptionGroupIdentifier),
                \(s.status.rawValue), \(s.expiresAt?.date), \(s.gracePeriodExpiresAt?.date), \(s.autoRenewStatus.map(Int.init)),
                \(s.autoRenewProductId), \(s.billingIssueSince?.date), \(s.revocationDate?.date), \(s.revocationReason.map(Int.init)),
                \(s.revocationType), \(s.ownershipType), \(s.offerType.map(Int.init)), \(s.offerIdentifier), \(s.offerDiscountType),
                \(s.appAccountToken), \(s.price), \(s.currency), \(s.lastNotificationType), \(s.lastNotificationSubtype),
                \(s.lastSignedDate.date), \(s.appleStatus.map(Int.init)), \(state)::jsonb, now())
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
                apple_status = EXCLUDED.apple_status, state = EXCLUDED.state, updated_at = now()
            WHERE entitlements.last_signed_date < EXCLUDED.last_signed_date
            """,
            logger: logger)
    }
}
