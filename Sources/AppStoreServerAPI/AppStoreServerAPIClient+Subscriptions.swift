import AppStoreNotifications
import AppStoreServerAPIModels

extension AppStoreServerAPIClient {
    /// [Get All Subscription Statuses](https://developer.apple.com/documentation/appstoreserverapi/get-all-subscription-statuses).
    public func subscriptionStatuses(bundleId: String, transactionId: String, status: [Int32] = []) async throws -> StatusResponse {
        let endpoint = "GET /inApps/v1/subscriptions/{transactionId}"
        var path = "/inApps/v1/subscriptions/" + Self.percentEncoded(transactionId)
        if !status.isEmpty { path += "?" + status.map { "status=\($0)" }.joined(separator: "&") }
        return try await call(.GET, path, endpoint: endpoint, bundleId: bundleId, family: .subscriptionStatus, body: nil, as: StatusResponse.self)
    }

    /// [Get Transaction History](https://developer.apple.com/documentation/appstoreserverapi/get-transaction-history) v2,
    /// oldest first; `revision` from the previous page (or the last import) asks for what follows.
    public func transactionHistory(bundleId: String, transactionId: String, revision: String?) async throws -> HistoryResponse {
        let endpoint = "GET /inApps/v2/history/{transactionId}"
        var path = "/inApps/v2/history/" + Self.percentEncoded(transactionId) + "?sort=ASCENDING"
        if let revision { path += "&revision=" + Self.percentEncoded(revision) }
        return try await call(.GET, path, endpoint: endpoint, bundleId: bundleId, family: .transactionHistory, body: nil, as: HistoryResponse.self)
    }

    /// [Get Transaction Info](https://developer.apple.com/documentation/appstoreserverapi/get-transaction-info).
    public func transactionInfo(bundleId: String, transactionId: String) async throws -> String {
        let endpoint = "GET /inApps/v1/transactions/{transactionId}"
        let object = try await call(.GET, "/inApps/v1/transactions/" + Self.percentEncoded(transactionId), endpoint: endpoint, bundleId: bundleId, family: .subscriptionStatus, body: nil)
        guard let signed = object["signedTransactionInfo"]?.stringValue else {
            throw AppStoreServerAPIError(kind: .malformedResponse, httpStatus: 200, reason: "TransactionInfoResponse.signedTransactionInfo is missing", endpoint: endpoint)
        }
        return signed
    }

    /// [Set App Account Token](https://developer.apple.com/documentation/appstoreserverapi/set-app-account-token):
    /// later transactions and renewals of `originalTransactionId` carry `appAccountToken`. Apple refuses a
    /// family-shared transaction with 4000185 (FamilyTransactionNotSupportedError).
    public func setAppAccountToken(bundleId: String, originalTransactionId: String, appAccountToken: String) async throws {
        _ = try await call(
            .PUT, "/inApps/v1/transactions/" + Self.percentEncoded(originalTransactionId) + "/appAccountToken",
            endpoint: "PUT /inApps/v1/transactions/{originalTransactionId}/appAccountToken", bundleId: bundleId, family: .consumption,
            body: JSONObject(["appAccountToken": .string(appAccountToken)]))
    }

    /// [Look Up Order ID](https://developer.apple.com/documentation/appstoreserverapi/look-up-order-id) (Production
    /// only): the order's signed transactions; none when Apple says the order id is invalid (`status` 1).
    public func lookUpOrder(bundleId: String, orderId: String) async throws -> [String] {
        let endpoint = "GET /inApps/v1/lookup/{orderId}"
        let object = try await call(.GET, "/inApps/v1/lookup/" + Self.percentEncoded(orderId), endpoint: endpoint, bundleId: bundleId, family: .lookup, body: nil)
        guard let status = object["status"]?.int64Value else {
            throw AppStoreServerAPIError(kind: .malformedResponse, httpStatus: 200, reason: "OrderLookupResponse.status is missing", endpoint: endpoint)
        }
        guard status == 0 else { return [] }
        guard case .array(let items)? = object["signedTransactions"] else { return [] }
        return items.compactMap(\.stringValue)
    }

    /// [Send Consumption Information](https://developer.apple.com/documentation/appstoreserverapi/send-consumption-information) v2
    /// (Apple answers 202). The request is checked against Apple's rules first; a violation is thrown before any call.
    public func sendConsumptionInformation(bundleId: String, transactionId: String, request: ConsumptionRequest, productType: String?) async throws {
        try request.validate(productType: productType)
        _ = try await call(
            .PUT, "/inApps/v2/transactions/consumption/" + Self.percentEncoded(transactionId), endpoint: "PUT /inApps/v2/transactions/consumption/{transactionId}",
            bundleId: bundleId, family: .consumption, body: request.json)
    }
}

extension AppStoreServerAPIClient {
    /// [Get Refund History](https://developer.apple.com/documentation/appstoreserverapi/get-refund-history) v2: one
    /// page; `revision` from the previous page asks for the next.
    public func refundHistory(bundleId: String, transactionId: String, revision: String?) async throws -> RefundHistoryResponse {
        var path = "/inApps/v2/refund/lookup/" + Self.percentEncoded(transactionId)
        if let revision { path += "?revision=" + Self.percentEncoded(revision) }
        return try await call(
            .GET, path, endpoint: "GET /inApps/v2/refund/lookup/{transactionId}", bundleId: bundleId, family: .lookup, body: nil,
            as: RefundHistoryResponse.self)
    }

    /// [Extend a Subscription Renewal Date](https://developer.apple.com/documentation/appstoreserverapi/extend-a-subscription-renewal-date).
    /// The request is checked first; its `requestIdentifier` makes a retry apply once.
    public func extendRenewalDate(bundleId: String, originalTransactionId: String, request: RenewalExtensionRequest) async throws -> ExtendRenewalDateResponse {
        try request.validate()
        var body = request
        body.productId = nil
        return try await call(
            .PUT, "/inApps/v1/subscriptions/extend/" + Self.percentEncoded(originalTransactionId),
            endpoint: "PUT /inApps/v1/subscriptions/extend/{originalTransactionId}", bundleId: bundleId, family: .consumption, body: body.json,
            as: ExtendRenewalDateResponse.self)
    }

    /// [Extend Subscription Renewal Dates for All Active Subscribers](https://developer.apple.com/documentation/appstoreserverapi/extend-subscription-renewal-dates-for-all-active-subscribers).
    public func massExtendRenewalDate(bundleId: String, request: RenewalExtensionRequest) async throws -> MassExtendRenewalDateResponse {
        try request.validate()
        guard request.productId != nil else { throw RenewalExtensionRefusal(rule: "a mass extension names its productId") }
        return try await call(
            .POST, "/inApps/v1/subscriptions/extend/mass", endpoint: "POST /inApps/v1/subscriptions/extend/mass", bundleId: bundleId, family: .consumption,
            body: request.json, as: MassExtendRenewalDateResponse.self)
    }

    /// [Get Status of Subscription Renewal Date Extensions](https://developer.apple.com/documentation/appstoreserverapi/get-status-of-subscription-renewal-date-extensions).
    public func massExtensionStatus(bundleId: String, productId: String, requestIdentifier: String) async throws -> MassExtendRenewalDateStatusResponse {
        try await call(
            .GET, "/inApps/v1/subscriptions/extend/mass/" + Self.percentEncoded(productId) + "/" + Self.percentEncoded(requestIdentifier),
            endpoint: "GET /inApps/v1/subscriptions/extend/mass/{productId}/{requestIdentifier}", bundleId: bundleId, family: .subscriptionStatus, body: nil,
            as: MassExtendRenewalDateStatusResponse.self)
    }

    /// [Get App Transaction Info](https://developer.apple.com/documentation/appstoreserverapi/get-app-transaction-info):
    /// the signed app transaction (verify it like every JWS).
    public func appTransactionInfo(bundleId: String, transactionId: String) async throws -> String {
        try await call(
            .GET, "/inApps/v1/transactions/appTransactions/" + Self.percentEncoded(transactionId),
            endpoint: "GET /inApps/v1/transactions/appTransactions/{transactionId}", bundleId: bundleId, family: .subscriptionStatus, body: nil,
            as: AppTransactionInfoResponse.self
        ).signedAppTransactionInfo
    }
}
