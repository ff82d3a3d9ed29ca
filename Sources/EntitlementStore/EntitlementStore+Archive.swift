import AppStoreNotifications
import Foundation
import PostgresNIO

/// One archived notification as an operator reads it back: the exact signedPayload Apple signed and the decoded
/// outer payload, whichever way the row is stored.
public struct ArchivedNotificationRow: Sendable {
    public var notificationUUID: String
    public var notificationType: String
    public var subtype: String?
    public var signedDate: Date
    public var environment: String
    public var bundleId: String
    public var originalTransactionId: String?
    public var storedAt: Date
    public var source: String?
    /// The exact JWS, rebuilt from its parts (or as stored raw).
    public var signedPayload: String
    /// The outer payload's JSON text (for a taken-apart row, exactly as signed).
    public var payload: String
    /// Whether the row is stored taken apart (chains once, payloads as JSON text) rather than raw.
    public var compact: Bool
}

/// What `compactArchive` did.
public struct ArchiveCompaction: Sendable, Equatable {
    /// Rows moved from the raw JWS to the taken-apart form.
    public var moved = 0
    /// Rows left raw because they do not rebuild exactly (not a JWS, say a pulled status document).
    public var keptRaw = 0
    public init() {}
}

/// A stored row whose parts do not give back a JWS: a header it references is missing.
public struct ArchiveRowBroken: Error, CustomStringConvertible {
    public var notificationUUID: String
    public var description: String {
        "archived notification \(notificationUUID) references a certificate chain (jws_headers) that is not stored; restore jws_headers from a backup"
    }
}

extension EntitlementStore {
    /// The archived notification `uuid`, rebuilt; nil if none is stored.
    public func archivedNotification(uuid: String) async throws -> ArchivedNotificationRow? {
        let rows = try await client.query(
            """
            SELECT n.notification_uuid, n.notification_type, n.subtype, n.signed_date, n.environment, n.bundle_id, n.original_transaction_id,
                n.stored_at, n.source, n.signed_payload, n.payload::text, encode(n.header_sha256, 'hex'), n.body::text, n.signature,
                (SELECT coalesce(jsonb_agg(jsonb_build_object('h', encode(h, 'hex'), 'p', b::text, 's', s) ORDER BY i), '[]')
                 FROM unnest(n.nested_header_sha256, n.nested_bodies, n.nested_signatures) WITH ORDINALITY AS x(h, b, s, i))::text
            FROM notification_archive n WHERE n.notification_uuid = \(uuid)
            """,
            logger: logger)
        typealias Row = (String, String, String?, Date, String, String, String?, Date, String?, String?, String?, String?, String?, String?, String)
        var found: Row?
        for try await row in rows.decode(Row.self) { found = row }
        guard let row = found else { return nil }
        var result = ArchivedNotificationRow(
            notificationUUID: row.0, notificationType: row.1, subtype: row.2, signedDate: row.3, environment: row.4, bundleId: row.5,
            originalTransactionId: row.6, storedAt: row.7, source: row.8, signedPayload: row.9 ?? "", payload: row.10 ?? "", compact: false)
        if row.9 == nil {
            guard let headerHex = row.11, let body = row.12, let signature = row.13,
                let parts = (try? StrictJSONParser().parse(Array(row.14.utf8)))?.arrayValue
            else { throw ArchiveRowBroken(notificationUUID: uuid) }
            var nested: [ArchivedJWS.Part] = []
            for part in parts {
                guard let object = part.objectValue, let h = object["h"]?.stringValue, let p = object["p"]?.stringValue, let s = object["s"]?.stringValue
                else { throw ArchiveRowBroken(notificationUUID: uuid) }
                nested.append(ArchivedJWS.Part(headerDigest: Self.bytes(hex: h), payload: p, signature: s))
            }
            let archived = ArchivedJWS(outer: .init(headerDigest: Self.bytes(hex: headerHex), payload: body, signature: signature), nested: nested, headers: [:])
            let segments = try await headerSegments([archived.outer.headerDigest] + nested.map(\.headerDigest))
            guard let jws = archived.signedPayload(header: { segments[$0] }), let payload = archived.outerPayload(header: { segments[$0] }) else {
                throw ArchiveRowBroken(notificationUUID: uuid)
            }
            result.signedPayload = jws
            result.payload = payload
            result.compact = true
        }
        return result
    }

    /// Header segments by digest.
    func headerSegments(_ digests: [[UInt8]]) async throws -> [[UInt8]: String] {
        var segments: [[UInt8]: String] = [:]
        let rows = try await client.query(
            "SELECT encode(sha256, 'hex'), segment FROM jws_headers WHERE sha256 = ANY(ARRAY(SELECT decode(d, 'hex') FROM unnest(\(Array(Set(digests.map { Hex.encode($0) })))::text[]) AS d))",
            logger: logger)
        for try await (hex, segment) in rows.decode((String, String).self) { segments[Self.bytes(hex: hex)] = segment }
        return segments
    }

    static func bytes(hex: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = hex.utf8.makeIterator()
        func nibble(_ c: UInt8) -> UInt8 { c <= 57 ? c - 48 : (c | 0x20) - 87 }
        while let high = iterator.next(), let low = iterator.next() { bytes.append(nibble(high) << 4 | nibble(low)) }
        return bytes
    }

    /// Moves rows archived raw (written before migration 13) to the taken-apart form, `batchSize` rows per
    /// transaction, in key order, locking only the rows of the batch at hand (`SKIP LOCKED`: a worker writing
    /// meanwhile is never blocked). Resumable: stop it at any point and run it again; what moved stays moved.
    /// Rows that do not rebuild exactly stay raw. `progress` is called after each batch; `maximumBatches` stops
    /// early (a run spread over quiet hours).
    public func compactArchive(
        batchSize: Int = 500, maximumBatches: Int = .max, progress: @Sendable (ArchiveCompaction) -> Void = { _ in }
    ) async throws -> ArchiveCompaction {
        var total = ArchiveCompaction()
        var cursor = ""
        for _ in 0..<maximumBatches {
            let (batch, last): (ArchiveCompaction, String?) = try await client.withTransaction(logger: logger) { connection in
                var raw: [(String, String)] = []
                let rows = try await connection.query(
                    """
                    SELECT notification_uuid, signed_payload FROM notification_archive
                    WHERE notification_uuid > \(cursor) AND body IS NULL AND signed_payload IS NOT NULL
                    ORDER BY notification_uuid LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                    """,
                    logger: logger)
                for try await row in rows.decode((String, String).self) { raw.append(row) }
                var batch = ArchiveCompaction()
                var moved: [(String, ArchivedJWS)] = []
                for (uuid, jws) in raw {
                    if let archived = ArchivedJWS.decompose(jws) { moved.append((uuid, archived)) } else { batch.keptRaw += 1 }
                }
                batch.moved = moved.count
                if !moved.isEmpty {
                    try await Self.storeHeaders(of: moved.map(\.1), on: connection, logger: logger)
                    let nested = moved.map { NestedColumns($0.1) }
                    let nestedColumns = NestedColumns.columns(header: "u.h", digests: "u.nh", payloads: "u.np", signatures: "u.ns")
                    try await connection.query(
                        """
                        UPDATE notification_archive n SET signed_payload = NULL, payload = NULL, header_sha256 = decode(u.h, 'hex'), body = u.b::json,
                            signature = u.s, (nested_header_sha256, nested_bodies, nested_signatures) = (SELECT \(unescaped: nestedColumns))
                        FROM unnest(\(moved.map(\.0))::text[], \(moved.map { Hex.encode($0.1.outer.headerDigest) })::text[],
                            \(moved.map(\.1.outer.payload))::text[], \(moved.map(\.1.outer.signature))::text[], \(nested.map(\.digests))::text[],
                            \(nested.map(\.payloads))::text[], \(nested.map(\.signatures))::text[]) AS u(id, h, b, s, nh, np, ns)
                        WHERE n.notification_uuid = u.id
                        """,
                        logger: logger)
                }
                return (batch, raw.last?.0)
            }
            total.moved += batch.moved
            total.keptRaw += batch.keptRaw
            progress(total)
            guard let last else { return total }
            cursor = last
        }
        return total
    }
}
