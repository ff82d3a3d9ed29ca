import Foundation
import PostgresNIO

/// One renewal-date extension as recorded (`renewal_extensions`).
public struct RenewalExtensionRecord: Sendable, Hashable {
    public var requestIdentifier: String
    public var originalTransactionId: String?
    public var productId: String?
    public var days: Int
    public var reasonCode: Int
    public var outcome: String
    public var effectiveDate: Date?
    public var appleError: String?
    public var complete: Bool?
    public var succeededCount: Int64?
    public var failedCount: Int64?
}

/// What the eligibility check reads of a subscription's row.
public struct ExtensionSubject: Sendable, Hashable {
    public var status: String
    public var offerType: Int32?
    public var offerDiscountType: String?
    public var ownershipType: String?
    /// The purchaser's originalTransactionId for a family member's row, when a row of ours shares its order line.
    public var purchaser: String?
    public var extensionsInLastYear: Int
}

extension EntitlementStore {
    /// The row's state for `RenewalExtensionEligibility`, nil when the subscription is not stored.
    public func extensionSubject(environment: String, bundleId: String, originalTransactionId: String) async throws -> ExtensionSubject? {
        let rows = try await client.query(
            """
            SELECT e.status, e.offer_type, e.offer_discount_type, e.ownership_type,
                (SELECT p.original_transaction_id FROM transactions f JOIN transactions p
                    ON p.payload ->> 'webOrderLineItemId' = f.payload ->> 'webOrderLineItemId' AND p.ownership_type = 'PURCHASED'
                    AND p.bundle_id = f.bundle_id AND p.environment = f.environment
                 WHERE f.original_transaction_id = e.original_transaction_id AND f.environment = e.environment LIMIT 1),
                (SELECT count(*)::int FROM renewal_extensions r WHERE r.original_transaction_id = e.original_transaction_id AND r.bundle_id = e.bundle_id
                    AND r.environment = e.environment AND r.outcome = 'succeeded' AND r.requested_at > now() - interval '365 days')
            FROM entitlements e WHERE e.environment = \(environment) AND e.bundle_id = \(bundleId) AND e.original_transaction_id = \(originalTransactionId)
            """,
            logger: logger)
        for try await (status, offerType, discount, ownership, purchaser, count) in rows.decode((String, Int32?, String?, String?, String?, Int).self) {
            return ExtensionSubject(
                status: status, offerType: offerType, offerDiscountType: discount, ownershipType: ownership, purchaser: purchaser, extensionsInLastYear: count)
        }
        return nil
    }

    /// The request identifier to send: an unfinished request with the same arguments from the last day (a retry),
    /// or `fresh`, recorded now.
    public func openRenewalExtension(
        bundleId: String, environment: String, originalTransactionId: String?, productId: String?, storefronts: [String], days: Int, reasonCode: Int, fresh: String
    ) async throws -> String {
        let existing = try await client.query(
            """
            SELECT request_identifier FROM renewal_extensions
            WHERE bundle_id = \(bundleId) AND environment = \(environment) AND original_transaction_id IS NOT DISTINCT FROM \(originalTransactionId)
                AND product_id IS NOT DISTINCT FROM \(productId) AND storefronts = \(storefronts)::text[] AND extend_by_days = \(days)
                AND reason_code = \(reasonCode) AND outcome = 'requested' AND requested_at > now() - interval '1 day'
            ORDER BY requested_at DESC LIMIT 1
            """,
            logger: logger)
        for try await id in existing.decode(String.self) { return id }
        try await client.query(
            """
            INSERT INTO renewal_extensions (request_identifier, bundle_id, environment, original_transaction_id, product_id, storefronts, extend_by_days, reason_code)
            VALUES (\(fresh), \(bundleId), \(environment), \(originalTransactionId), \(productId), \(storefronts)::text[], \(days), \(reasonCode))
            """,
            logger: logger)
        return fresh
    }

    /// Apple's answer to an extension: `succeeded` (with the new renewal date) or `failed` (with Apple's error).
    public func finishRenewalExtension(requestIdentifier: String, succeeded: Bool, effectiveDate: Date?, appleError: String?) async throws {
        try await client.query(
            """
            UPDATE renewal_extensions SET outcome = \(succeeded ? "succeeded" : "failed"), effective_date = \(effectiveDate), apple_error = \(appleError)
            WHERE request_identifier = \(requestIdentifier)
            """,
            logger: logger)
    }

    /// A mass extension's status as Apple reported it (`extend status`, and the RENEWAL_EXTENSION SUMMARY).
    public func recordMassExtensionStatus(requestIdentifier: String, complete: Bool, completeDate: Date?, succeeded: Int64?, failed: Int64?) async throws {
        try await client.query(
            """
            UPDATE renewal_extensions SET complete = \(complete), complete_date = \(completeDate), succeeded_count = \(succeeded), failed_count = \(failed),
                outcome = CASE WHEN \(complete) THEN 'succeeded' ELSE outcome END
            WHERE request_identifier = \(requestIdentifier)
            """,
            logger: logger)
    }

    public func renewalExtension(requestIdentifier: String) async throws -> RenewalExtensionRecord? {
        let rows = try await client.query(
            """
            SELECT request_identifier, original_transaction_id, product_id, extend_by_days, reason_code, outcome, effective_date, apple_error, complete,
                succeeded_count, failed_count
            FROM renewal_extensions WHERE request_identifier = \(requestIdentifier)
            """,
            logger: logger)
        for try await (id, otid, product, days, reason, outcome, effective, error, complete, succeeded, failed) in rows.decode(
            (String, String?, String?, Int, Int, String, Date?, String?, Bool?, Int64?, Int64?).self)
        {
            return RenewalExtensionRecord(
                requestIdentifier: id, originalTransactionId: otid, productId: product, days: days, reasonCode: reason, outcome: outcome, effectiveDate: effective,
                appleError: error, complete: complete, succeededCount: succeeded, failedCount: failed)
        }
        return nil
    }
}

extension EntitlementStore {
    /// A RENEWAL_EXTENSION SUMMARY (Apple's end of a mass extension: no `data`, a `summary`) completes its request's
    /// row in the batch transaction, so `pipelinectl extend status` shows it without asking Apple again. A summary
    /// for a request this pipeline did not make (another tool's) is archived and nothing else.
    func recordExtensionSummaries(_ firstSeen: [StoredNotification], on connection: PostgresConnection) async throws {
        for record in firstSeen where record.verified.payload.rawNotificationType == "RENEWAL_EXTENSION" && record.verified.payload.rawSubtype == "SUMMARY" {
            guard let summary = record.verified.payload.summary, let requestIdentifier = summary.requestIdentifier else { continue }
            try await connection.query(
                """
                UPDATE renewal_extensions SET complete = true, complete_date = \(record.verified.signedDate.date), succeeded_count = \(summary.succeededCount),
                    failed_count = \(summary.failedCount), outcome = 'succeeded', summary_notification_uuid = \(record.deduplicationKey)
                WHERE request_identifier = \(requestIdentifier) AND bundle_id = \(record.verified.bundleId)
                """,
                logger: logger)
        }
    }

    /// Whether Apple's RENEWAL_EXTENSION SUMMARY of a mass extension has been received.
    public func extensionSummaryReceived(requestIdentifier: String) async throws -> Bool {
        let rows = try await client.query(
            "SELECT summary_notification_uuid IS NOT NULL FROM renewal_extensions WHERE request_identifier = \(requestIdentifier)", logger: logger)
        for try await received in rows.decode(Bool.self) { return received }
        return false
    }
}
