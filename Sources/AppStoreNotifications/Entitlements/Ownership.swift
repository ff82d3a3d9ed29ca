/// Who owns a purchase, as the customer API decides it: RevenueCat's vocabulary, so app teams can compare.
///
/// Ownership lives in the pipeline's own table (`customer_ownership`), not in Apple's `appAccountToken`: after a
/// transfer, Apple's later notifications still carry the old token, and they never move the purchase back.
public enum OwnershipPolicy: String, Sendable, Hashable, CaseIterable, Codable {
    /// A purchase posted by another customer moves to that customer (RevenueCat's default).
    case transfer
    /// A purchase stays with its first owner; another customer gets 409.
    case keep
    /// A purchase moves only when its current owner has no active subscription or purchase in the app.
    case transferIfInactive = "transfer-if-inactive"
}

/// What applying a posted purchase does to its ownership.
public enum OwnershipDecision: String, Sendable, Hashable {
    /// The customer already owns it (our table, or Apple's token where our table has no row).
    case alreadyOwned = "owned"
    /// Nobody owned it (no token: offer codes, purchases outside the app, family sharing, legacy): now the customer does.
    case bound
    /// Another customer owned it and the policy moved it.
    case transferred
    /// Another customer owns it and the policy keeps it there: the API answers 409.
    case conflict

    /// The decision for `customer` posting a purchase whose current owner is `owner`.
    /// `ownerHasActiveAccess` is asked only under `transfer-if-inactive`.
    public static func decide(
        policy: OwnershipPolicy, customer: String, owner: String?, ownerHasActiveAccess: () -> Bool
    ) -> OwnershipDecision {
        guard let owner else { return .bound }
        if owner.lowercased() == customer.lowercased() { return .alreadyOwned }
        switch policy {
        case .transfer: return .transferred
        case .keep: return .conflict
        case .transferIfInactive: return ownerHasActiveAccess() ? .conflict : .transferred
        }
    }

    /// Whether the purchase now belongs to the customer who posted it.
    public var accepted: Bool { self != .conflict }
}

/// A customer id as the customer API takes it: a UUID (the app's user id as an `appAccountToken`), compared and
/// stored in lower case.
public enum CustomerId {
    /// The canonical (lower-case) form of `text` if it is a UUID (8-4-4-4-12 hexadecimal digits), nil otherwise.
    public static func canonical(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return nil }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return nil }
            } else {
                let isHex = (48...57).contains(byte) || (65...70).contains(byte) || (97...102).contains(byte)
                guard isHex else { return nil }
            }
        }
        return text.lowercased()
    }
}
