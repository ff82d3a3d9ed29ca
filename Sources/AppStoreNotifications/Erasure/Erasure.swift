import Crypto

/// The secret behind erasure suppression entries: each erased identifier is kept only as HMAC-SHA256 under this
/// key, so the list that keeps an erased customer forgotten (CCPA allows a record "for the purpose of ensuring that
/// the consumer's personal information remains deleted") cannot be read back into identifiers without the key,
/// and the key lives outside the database (`ERASURE_KEY_FILE` or `ERASURE_KEY`).
public struct ErasureKey: Sendable {
    let key: SymmetricKey

    /// The shortest secret accepted, in bytes (e.g. `openssl rand -hex 32`, 64 characters).
    public static let minimumLength = 32

    /// `secret`: the file's text (surrounding whitespace is not part of it).
    public init(secret: String) throws(ErasureKeyError) {
        let trimmed = secret.trimmingWhitespace()
        guard trimmed.utf8.count >= Self.minimumLength else { throw .tooShort(trimmed.utf8.count) }
        key = SymmetricKey(data: Array(trimmed.utf8))
    }

    /// A public fingerprint of the key (16 hex digits), stored beside every suppression entry: a process holding
    /// another key sees that it cannot check the list and stops, instead of letting an erased customer back in.
    public var id: String {
        Hex.encode(Array(HMAC<SHA256>.authenticationCode(for: Array("erasure-key-id/v1".utf8), using: key).prefix(8)))
    }

    /// The keyed digest of one identifier (its kind and app are part of what is hashed).
    public func digest(_ identifier: ErasedIdentifier) -> [UInt8] {
        var message = Array("erasure/v1".utf8)
        for part in [identifier.kind.rawValue, identifier.bundleId, identifier.normalizedValue] {
            message.append(0)
            message.append(contentsOf: Array(part.utf8))
        }
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: key))
    }
}

/// Why an erasure key was refused.
public enum ErasureKeyError: Error, Sendable, Hashable, CustomStringConvertible {
    case tooShort(Int)

    public var description: String {
        switch self {
        case .tooShort(let length):
            "the erasure key has \(length) bytes; at least \(ErasureKey.minimumLength) are needed (e.g. `openssl rand -hex 32 > erasure.key`)"
        }
    }
}

/// What kind of identifier a suppression entry stands for.
public enum ErasedIdentifierKind: String, Sendable, Hashable, CaseIterable, Codable {
    case originalTransactionId, transactionId, appAccountToken, appTransactionId, customerId
}

/// One identifier of an erased customer, within one app.
public struct ErasedIdentifier: Sendable, Hashable {
    public var kind: ErasedIdentifierKind
    public var bundleId: String
    public var value: String

    public init(_ kind: ErasedIdentifierKind, bundleId: String, value: String) {
        self.kind = kind
        self.bundleId = bundleId
        self.value = value
    }

    /// UUID-shaped identifiers (tokens, customer ids) compare case-insensitively, as the customer API does.
    public var normalizedValue: String {
        switch kind {
        case .appAccountToken, .customerId: value.lowercased()
        default: value
        }
    }
}

extension VerifiedNotification {
    /// The identifiers this record is about, for the suppression check: the subscription, the transaction, the
    /// app account token, the app transaction (`appData` of RESCIND_CONSENT too) and, for a purchase posted through
    /// the customer API, the claiming customer.
    public var erasureIdentifiers: [ErasedIdentifier] {
        var identifiers: Set<ErasedIdentifier> = []
        func add(_ kind: ErasedIdentifierKind, _ value: String?) {
            guard let value, !value.isEmpty else { return }
            identifiers.insert(ErasedIdentifier(kind, bundleId: bundleId, value: value))
        }
        if let transaction = transactionInfo?.model {
            add(.originalTransactionId, transaction.originalTransactionId)
            add(.transactionId, transaction.transactionId)
            add(.appAccountToken, transaction.appAccountToken)
            add(.appTransactionId, transaction.appTransactionId)
        }
        if let renewal = renewalInfo?.model {
            add(.originalTransactionId, renewal.originalTransactionId)
            add(.appAccountToken, renewal.appAccountToken)
            add(.appTransactionId, renewal.appTransactionId)
        }
        add(.appTransactionId, appTransactionInfo?.model.appTransactionId)
        add(.customerId, purchase?.customerId)
        return identifiers.sorted { ($0.kind.rawValue, $0.value) < ($1.kind.rawValue, $1.value) }
    }

    /// When what this record says happened, to compare with an erasure's time: a record from before the erasure is
    /// suppressed, one from after it (Apple kept billing the person) starts a new history.
    ///
    /// - Apple's notifications (and those a backfill fetches, unchanged): their `signedDate`.
    /// - Pulled status snapshots and history transactions: Apple signs old facts again at each pull, so their
    ///   signedDate says nothing; the transaction's own dates do (the later of purchase and revocation).
    /// - Purchases posted through the customer API: when the app posted it (`receivedAt`, the record's header), so a
    ///   replayed claim stays erased and a new one after the erasure is the app's own new request.
    public func erasureTime(receivedAt: Timestamp?) -> Timestamp {
        switch payload.rawNotificationType {
        case StatusSnapshotDocument.notificationType, SignedPayloadVerifier.historyTransactionType:
            let transaction = transactionInfo?.model
            let dates = [transaction?.purchaseDate, transaction?.revocationDate].compactMap { $0 }
            return dates.max() ?? signedDate
        case EntitlementEventCause.purchaseType:
            return receivedAt ?? signedDate
        default:
            return signedDate
        }
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var scalars = Substring(self)
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}

/// The PostgreSQL advisory lock ("eras") an erasure takes exclusively and every writer of a customer's data takes
/// shared in its transaction (a worker batch, the webhooks service's new deliveries): a writer that began before the
/// erasure commits before the erasure resolves its subject (its rows are erased with the rest); one that begins
/// after it sees the erasure's suppression entries and erased event ids.
public enum ErasureLock {
    public static let advisoryKey: Int64 = 0x6572_6173
}

/// A keyed digest (HMAC-SHA256) of text that may name a customer, for what the pipeline keeps only to find a run
/// again (`pull_runs`, `backfill_runs`): without the secret it cannot be reversed by enumerating transaction ids,
/// as a plain SHA-256 of a 16-digit id can.
public struct KeyedDigest: Sendable {
    let key: SymmetricKey

    /// `secret`: the deployment's erasure key (`ErasureKey.runDigest`), else another secret kept outside the database.
    public init(secret: [UInt8]) {
        key = SymmetricKey(data: SHA256.hash(data: Array("keyed-digest/v1".utf8) + [0] + secret))
    }

    /// `hmac:` and 64 hex digits.
    public func hex(_ text: String) -> String {
        "hmac:" + Hex.encode(Array(HMAC<SHA256>.authenticationCode(for: Array(text.utf8), using: key)))
    }
}

extension ErasureKey {
    /// The keyed digest pull runs are found again by, under this key (a purpose of its own: never an entry's digest).
    public var runDigest: KeyedDigest {
        KeyedDigest(secret: Array(HMAC<SHA256>.authenticationCode(for: Array("run-keys/v1".utf8), using: key)))
    }
}
