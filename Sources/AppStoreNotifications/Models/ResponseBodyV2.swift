/// The body Apple POSTs to the notification URL:
/// [responseBodyV2](https://developer.apple.com/documentation/appstoreservernotifications/responsebodyv2).
public struct ResponseBodyV2: Sendable, Hashable, Codable {
    /// The notification, a JWS in compact serialization signed by the App Store.
    public var signedPayload: String

    public init(signedPayload: String) {
        self.signedPayload = signedPayload
    }
}

/// [responseBodyV2DecodedPayload](https://developer.apple.com/documentation/appstoreservernotifications/responsebodyv2decodedpayload):
/// the decoded `signedPayload`.
public struct ResponseBodyV2DecodedPayload: Sendable, Hashable, Codable {
    public var rawNotificationType: String?
    public var rawSubtype: String?
    /// Unique per notification; Apple resends the same UUID on retries, so it is our dedupe key.
    public var notificationUUID: String?
    /// Present for notifications about an app's transactions (most types).
    public var data: NotificationData?
    /// Present for RENEWAL_EXTENSION/SUMMARY.
    public var summary: Summary?
    /// Present for EXTERNAL_PURCHASE_TOKEN.
    public var externalPurchaseToken: ExternalPurchaseToken?
    /// Present for notifications about the app rather than a transaction (e.g. RESCIND_CONSENT).
    public var appData: AppData?
    public var version: String?
    public var signedDate: Timestamp?

    public var notificationType: NotificationTypeV2? { rawNotificationType.flatMap(NotificationTypeV2.init(rawValue:)) }
    public var subtype: Subtype? { rawSubtype.flatMap(Subtype.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case rawNotificationType = "notificationType"
        case rawSubtype = "subtype"
        case notificationUUID, data, summary, externalPurchaseToken, appData, version, signedDate
    }
}

/// [data](https://developer.apple.com/documentation/appstoreservernotifications/data): the app and
/// transaction a notification is about. Named `NotificationData` so it does not shadow Foundation's `Data`.
public struct NotificationData: Sendable, Hashable, Codable {
    public var rawEnvironment: String?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var bundleVersion: String?
    /// A nested JWS: ``JWSTransactionDecodedPayload``.
    public var signedTransactionInfo: String?
    /// A nested JWS: ``JWSRenewalInfoDecodedPayload``.
    public var signedRenewalInfo: String?
    public var rawStatus: Int32?
    public var rawConsumptionRequestReason: String?

    public var environment: Environment? { rawEnvironment.flatMap(Environment.init(rawValue:)) }
    public var status: SubscriptionStatus? { rawStatus.flatMap(SubscriptionStatus.init(rawValue:)) }
    public var consumptionRequestReason: ConsumptionRequestReason? {
        rawConsumptionRequestReason.flatMap(ConsumptionRequestReason.init(rawValue:))
    }

    enum CodingKeys: String, CodingKey {
        case rawEnvironment = "environment"
        case appAppleId, bundleId, bundleVersion, signedTransactionInfo, signedRenewalInfo
        case rawStatus = "status"
        case rawConsumptionRequestReason = "consumptionRequestReason"
    }
}

/// [summary](https://developer.apple.com/documentation/appstoreservernotifications/summary) of a
/// subscription-renewal-date extension request (RENEWAL_EXTENSION/SUMMARY).
public struct Summary: Sendable, Hashable, Codable {
    public var rawEnvironment: String?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var productId: String?
    public var requestIdentifier: String?
    public var storefrontCountryCodes: [String]?
    public var succeededCount: Int64?
    public var failedCount: Int64?

    public var environment: Environment? { rawEnvironment.flatMap(Environment.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case rawEnvironment = "environment"
        case appAppleId, bundleId, productId, requestIdentifier, storefrontCountryCodes, succeededCount, failedCount
    }
}

/// [externalPurchaseToken](https://developer.apple.com/documentation/appstoreservernotifications/externalpurchasetoken).
public struct ExternalPurchaseToken: Sendable, Hashable, Codable {
    /// Sandbox tokens start with `SANDBOX`: it is how the environment of this notification is told.
    public var externalPurchaseId: String?
    public var tokenCreationDate: Timestamp?
    public var appAppleId: Int64?
    public var bundleId: String?

    /// Apple carries no environment field here; a `SANDBOX` prefix on the id marks the sandbox.
    public var inferredEnvironment: Environment {
        (externalPurchaseId?.hasPrefix("SANDBOX") ?? false) ? .sandbox : .production
    }
}

/// [appData](https://developer.apple.com/documentation/appstoreservernotifications/appdata): the app a
/// notification is about, when it is about no transaction.
public struct AppData: Sendable, Hashable, Codable {
    public var appAppleId: Int64?
    public var bundleId: String?
    public var rawEnvironment: String?
    /// A nested JWS: ``AppTransaction``.
    public var signedAppTransactionInfo: String?

    public var environment: Environment? { rawEnvironment.flatMap(Environment.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case appAppleId, bundleId
        case rawEnvironment = "environment"
        case signedAppTransactionInfo
    }
}
