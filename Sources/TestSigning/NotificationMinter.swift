import AppStoreNotifications
import Foundation

/// Mints realistic, fully signed App Store Server Notifications V2 (outer JWS with signed transaction and
/// renewal info nested), for tests, benchmarks and the demo. Every id is derived from a seed so runs repeat.
public struct NotificationMinter: Sendable {
    public var chain: TestSigningChain
    public var bundleId: String
    public var appAppleId: Int64
    public var environment: Environment

    public init(chain: TestSigningChain, bundleId: String = "com.example.pipeline.app", appAppleId: Int64 = 1_234_567_890, environment: Environment = .production) {
        self.chain = chain
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
    }

    /// The state of one subscription at the moment a notification is sent.
    public struct SubscriptionEvent: Sendable {
        public var notificationType: String
        public var subtype: String?
        public var notificationUUID: String
        public var signedDate: Int64
        public var originalTransactionId: String
        public var transactionId: String
        public var productId: String = "com.example.pipeline.pro.monthly"
        public var autoRenewProductId: String?
        public var purchaseDate: Int64
        public var expiresDate: Int64
        public var autoRenewStatus: Int32 = 1
        public var isInBillingRetryPeriod = false
        public var gracePeriodExpiresDate: Int64?
        public var revocationDate: Int64?
        public var revocationReason: Int32?
        public var status: Int32 = 1
        public var appAccountToken: String
        public var productType: String = "Auto-Renewable Subscription"
        public var price: Int64 = 9990
        public var currency = "USD"
        public var inAppOwnershipType = "PURCHASED"
        /// The renewal info's `renewalDate` (the latest period's end); default: `expiresDate`.
        public var renewalDate: Int64?
        public var isUpgraded: Bool?
        public var previousOriginalTransactionId: String?
        /// With `revocationDate`: `REFUND_FULL` (default), `REFUND_PRORATED` or `FAMILY_REVOKE`.
        public var revocationType = "REFUND_FULL"
        /// With `revocationDate`, in thousandths of a percent (default 100000).
        public var revocationPercentage: Int64 = 100_000
        /// False: the notification carries no `signedRenewalInfo` (Apple omits it in some cases).
        public var includesRenewalInfo = true
        /// False: the notification carries no `data.status`.
        public var includesStatus = true
        /// The transaction's `storefront` (Apple's three-letter code).
        public var storefront = "USA"
        /// An offer on the transaction: `offerType` (1 introductory, 2 promotional, 3 offer code, 4 win-back).
        public var offerType: Int32?
        /// The offer's identifier (promotional and win-back offers, offer codes).
        public var offerIdentifier: String?
        /// `FREE_TRIAL`, `PAY_AS_YOU_GO` or `PAY_UP_FRONT`.
        public var offerDiscountType: String?
        /// The offer's duration (ISO 8601).
        public var offerPeriod: String?
        /// `MONTHLY` (a 12-month commitment billed monthly) or `BILLED_UPFRONT`.
        public var billingPlanType: String?
        /// The transaction's `commitmentInfo` (with `billingPlanType`).
        public var commitmentInfo: JSONObject?
        /// The app transaction (one Apple Account's download of the app): `7041` + the subscription's id unless set
        /// (family members' own rows and their family-shared rows share theirs).
        public var appTransactionId: String?
        /// Fields added to the renewal info as they are (its `commitmentInfo`, `advancedCommerceInfo`, `renewalBillingPlanType`).
        public var renewalExtras: JSONObject?
        /// The transaction's webOrderLineItemId; nil: the transaction id reversed.
        public var webOrderLineItemId: String?

        public init(
            notificationType: String, subtype: String? = nil, notificationUUID: String, signedDate: Int64,
            originalTransactionId: String, transactionId: String, purchaseDate: Int64, expiresDate: Int64, appAccountToken: String
        ) {
            self.notificationType = notificationType
            self.subtype = subtype
            self.notificationUUID = notificationUUID
            self.signedDate = signedDate
            self.originalTransactionId = originalTransactionId
            self.transactionId = transactionId
            self.purchaseDate = purchaseDate
            self.expiresDate = expiresDate
            self.appAccountToken = appAccountToken
        }

        /// A renewal event derived from `seed`, one month long, signed at `signedDate`.
        public static func sample(seed: Int, signedDate: Int64 = 1_780_000_000_000, type: String = "DID_RENEW", subtype: String? = nil) -> SubscriptionEvent {
            let month: Int64 = 30 * 24 * 3600 * 1000
            return SubscriptionEvent(
                notificationType: type, subtype: subtype,
                notificationUUID: deterministicUUID(seed),
                signedDate: signedDate,
                originalTransactionId: String(2_000_000_000_000_000 + seed / 4),
                transactionId: String(2_000_000_100_000_000 + seed),
                purchaseDate: signedDate - 5_000, expiresDate: signedDate - 5_000 + month,
                appAccountToken: deterministicUUID(seed / 4 + 7_000_000))
        }

        /// The same subscription renewed in a new transaction: signed `delay` milliseconds from now (later than
        /// anything stored before), active for a month from then, auto-renewing.
        public func renewedNow(transactionId: String, notificationUUID: String, delay: Int64) -> SubscriptionEvent {
            var renewal = self
            renewal.notificationUUID = notificationUUID
            renewal.transactionId = transactionId
            renewal.signedDate = Int64(Date().timeIntervalSince1970 * 1000) + delay
            renewal.purchaseDate = renewal.signedDate
            renewal.expiresDate = renewal.signedDate + 30 * 86_400_000
            renewal.status = 1
            renewal.autoRenewStatus = 1
            return renewal
        }
    }

    /// The decoded signed transaction of `event`.
    public func transaction(_ event: SubscriptionEvent) -> JSONObject {
        var transaction = JSONObject([
            "transactionId": .string(event.transactionId),
            "originalTransactionId": .string(event.originalTransactionId),
            "webOrderLineItemId": .string(event.webOrderLineItemId ?? String(event.transactionId.reversed())),
            "bundleId": .string(bundleId),
            "productId": .string(event.productId),
            "subscriptionGroupIdentifier": .string("21000001"),
            "purchaseDate": number(event.purchaseDate),
            "originalPurchaseDate": number(event.purchaseDate - 90 * 24 * 3600 * 1000),
            "expiresDate": number(event.expiresDate),
            "quantity": number(1),
            "type": .string(event.productType),
            "appAccountToken": .string(event.appAccountToken),
            "inAppOwnershipType": .string(event.inAppOwnershipType),
            "signedDate": number(event.signedDate),
            "environment": .string(environment.rawValue),
            "transactionReason": .string(event.notificationType == "SUBSCRIBED" ? "PURCHASE" : "RENEWAL"),
            "storefront": .string(event.storefront),
            "storefrontId": .string("143441"),
            "price": number(event.price),
            "currency": .string(event.currency),
            "appTransactionId": .string(event.appTransactionId ?? "7041" + event.originalTransactionId),
        ])
        if event.productType != "Auto-Renewable Subscription" {
            transaction["expiresDate"] = nil
            transaction["subscriptionGroupIdentifier"] = nil
            transaction["webOrderLineItemId"] = nil
        }
        if let revocationDate = event.revocationDate {
            transaction["revocationDate"] = number(revocationDate)
            transaction["revocationReason"] = number(Int64(event.revocationReason ?? 0))
            transaction["revocationType"] = .string(event.revocationType)
            transaction["revocationPercentage"] = number(event.revocationPercentage)
        }
        // No token: offer codes, purchases outside the app, family sharing (Apple leaves the field out).
        if event.appAccountToken.isEmpty { transaction["appAccountToken"] = nil }
        if let isUpgraded = event.isUpgraded { transaction["isUpgraded"] = .bool(isUpgraded) }
        if let previous = event.previousOriginalTransactionId { transaction["previousOriginalTransactionId"] = .string(previous) }
        if let offerType = event.offerType { transaction["offerType"] = number(Int64(offerType)) }
        if let offer = event.offerIdentifier { transaction["offerIdentifier"] = .string(offer) }
        if let discount = event.offerDiscountType { transaction["offerDiscountType"] = .string(discount) }
        if let period = event.offerPeriod { transaction["offerPeriod"] = .string(period) }
        if let plan = event.billingPlanType { transaction["billingPlanType"] = .string(plan) }
        if let commitment = event.commitmentInfo { transaction["commitmentInfo"] = .object(commitment) }
        return transaction
    }

    /// The decoded signed renewal info of `event`.
    public func renewalInfo(_ event: SubscriptionEvent) -> JSONObject {
        var renewal = JSONObject([
            "originalTransactionId": .string(event.originalTransactionId),
            "autoRenewProductId": .string(event.autoRenewProductId ?? event.productId),
            "productId": .string(event.productId),
            "autoRenewStatus": number(Int64(event.autoRenewStatus)),
            "isInBillingRetryPeriod": .bool(event.isInBillingRetryPeriod),
            "signedDate": number(event.signedDate),
            "environment": .string(environment.rawValue),
            "recentSubscriptionStartDate": number(event.purchaseDate - 90 * 24 * 3600 * 1000),
            "renewalDate": number(event.renewalDate ?? event.expiresDate),
            "renewalPrice": number(event.price),
            "currency": .string(event.currency),
            "appAccountToken": .string(event.appAccountToken),
            "appTransactionId": .string(event.appTransactionId ?? "7041" + event.originalTransactionId),
            "eligibleWinBackOfferIds": .array([]),
        ])
        if event.appAccountToken.isEmpty { renewal["appAccountToken"] = nil }
        if let grace = event.gracePeriodExpiresDate { renewal["gracePeriodExpiresDate"] = number(grace) }
        if event.autoRenewStatus == 0 { renewal["expirationIntent"] = number(1) }
        for member in event.renewalExtras ?? JSONObject() { renewal[member.key] = member.value }
        return renewal
    }

    /// The decoded outer notification of `event`, with its nested JWSs signed.
    public func payload(_ event: SubscriptionEvent) -> JSONObject {
        payload(event, nestedJWS: { chain.sign($0) })
    }

    /// The decoded outer notification of `event`, each nested JWS made by `nestedJWS` (the seed tool's unsigned
    /// ones: the same header and payload, a constant signature).
    public func payload(_ event: SubscriptionEvent, nestedJWS: (JSONObject) -> String) -> JSONObject {
        var data = JSONObject([
            "appAppleId": number(appAppleId),
            "bundleId": .string(bundleId),
            "bundleVersion": .string("412"),
            "environment": .string(environment.rawValue),
            "signedTransactionInfo": .string(nestedJWS(transaction(event))),
        ])
        if event.productType == "Auto-Renewable Subscription" {
            if event.includesRenewalInfo { data["signedRenewalInfo"] = .string(nestedJWS(renewalInfo(event))) }
            if event.includesStatus { data["status"] = number(Int64(event.status)) }
        }
        var payload = JSONObject([
            "notificationType": .string(event.notificationType),
            "notificationUUID": .string(event.notificationUUID),
            "data": .object(data),
            "version": .string("2.0"),
            "signedDate": number(event.signedDate),
        ])
        if let subtype = event.subtype { payload["subtype"] = .string(subtype) }
        return payload
    }

    /// A signed notification (the `signedPayload` Apple would POST) for `event`.
    public func signedNotification(_ event: SubscriptionEvent) -> String {
        chain.sign(payload(event))
    }

    /// A RESCIND_CONSENT notification (a parent or guardian withdrew consent): `appData` with the app transaction
    /// `appTransactionId`, no `data`, as Apple's documentation shows it.
    public func signedRescindConsent(notificationUUID: String, signedDate: Int64, appTransactionId: String) -> String {
        chain.sign(JSONObject([
            "notificationType": .string("RESCIND_CONSENT"), "notificationUUID": .string(notificationUUID), "version": .string("2.0"),
            "signedDate": number(signedDate),
            "appData": .object(JSONObject([
                "appAppleId": number(appAppleId), "bundleId": .string(bundleId), "environment": .string(environment.rawValue),
                "signedAppTransactionInfo": .string(signedAppTransaction(appTransactionId: appTransactionId, signedDate: signedDate)),
            ])),
        ]))
    }

    /// RENEWAL_EXTENSION / SUMMARY: the end of a mass extension, a `summary` instead of `data`, as Apple's documentation shows it.
    public func signedRenewalExtensionSummary(
        notificationUUID: String, signedDate: Int64, requestIdentifier: String, productId: String, storefronts: [String], succeeded: Int64, failed: Int64
    ) -> String {
        chain.sign(JSONObject([
            "notificationType": .string("RENEWAL_EXTENSION"), "subtype": .string("SUMMARY"), "notificationUUID": .string(notificationUUID),
            "version": .string("2.0"), "signedDate": number(signedDate),
            "summary": .object(JSONObject([
                "requestIdentifier": .string(requestIdentifier), "environment": .string(environment.rawValue), "appAppleId": number(appAppleId),
                "bundleId": .string(bundleId), "productId": .string(productId), "storefrontCountryCodes": .array(storefronts.map { .string($0) }),
                "failedCount": number(failed), "succeededCount": number(succeeded),
            ])),
        ]))
    }

    /// A signed app transaction (`JWSAppTransactionDecodedPayload`), as Get App Transaction Info and `appData` carry it.
    public func signedAppTransaction(appTransactionId: String, signedDate: Int64) -> String {
        chain.sign(JSONObject([
            "receiptType": .string(environment.rawValue), "appAppleId": number(appAppleId), "bundleId": .string(bundleId),
            "applicationVersion": .string("1"), "receiptCreationDate": number(signedDate), "originalPurchaseDate": number(signedDate - 86_400_000),
            "originalApplicationVersion": .string("1"), "appTransactionId": .string(appTransactionId), "originalPlatform": .string("iOS"),
        ]))
    }

    /// `count` distinct, realistically sized (≈19 KB, like Apple's) notification bodies: one minted notification
    /// whose signature segment is varied per body. For ingest tests and benchmarks: ingest does not verify, so
    /// shape and size are what matter; the worker would reject all but none of them.
    public static func realisticBodies(count: Int) throws -> [[UInt8]] {
        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain())
        var event = SubscriptionEvent.sample(seed: 1)
        event.appAccountToken = deterministicUUID(77)
        var payload = minter.payload(event)
        payload["padding"] = .string(String(repeating: "p", count: 2_500))
        let signed = minter.chain.sign(payload)
        let prefix = signed[..<signed.lastIndex(of: ".")!]
        return (0..<count).map { index in
            let signature = Base64.encode((0..<64).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ index ^ (index >> 8)) }, alphabet: .url)
            return Array(body(prefix + "." + signature).utf8)
        }
    }

    /// The HTTP body Apple would POST for `signedPayload`.
    public static func body(_ signedPayload: String) -> String {
        JSONObject(["signedPayload": .string(signedPayload)]).serialized
    }

    private func number(_ value: Int64) -> JSONValue { .number(JSONNumber(value)) }
}

/// A version-4-shaped UUID string derived from `seed`, so that test runs repeat exactly.
public func deterministicUUID(_ seed: Int) -> String {
    var state = UInt64(truncatingIfNeeded: seed) &* 0x9E37_79B9_7F4A_7C15 &+ 0x1234_5678
    func next() -> UInt64 {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return state
    }
    let a = next(), b = next()
    let hex = Hex.encode((0..<8).map { UInt8(truncatingIfNeeded: a >> (8 * $0)) } + (0..<8).map { UInt8(truncatingIfNeeded: b >> (8 * $0)) })
    let characters = Array(hex)
    func part(_ range: Range<Int>) -> String { String(characters[range]) }
    return "\(part(0..<8))-\(part(8..<12))-4\(part(13..<16))-a\(part(17..<20))-\(part(20..<32))"
}
