/// Step 6 and 7: whose payload is this, and do the nested payloads belong to the same app and environment?
///
/// Identity is checked only after the signature: before it, every field is attacker-controlled text.
extension SignedPayloadVerifier {
    /// The verified identity of a notification, to which its nested payloads must be bound.
    struct Binding {
        var bundleId: String
        var environment: Environment
        var appAppleId: Int64?
    }

    func finishNotification(_ outer: VerifiedJWS) async throws(VerificationError) -> VerifiedNotification {
        let payload = try decode(ResponseBodyV2DecodedPayload.self, outer.payload, what: "the notification")

        // Apple's order of precedence for where a notification names its app.
        let claimed: (bundleId: String?, appAppleId: Int64?, environment: String?)
        if let data = payload.data {
            claimed = (data.bundleId, data.appAppleId, data.rawEnvironment)
        } else if let summary = payload.summary {
            claimed = (summary.bundleId, summary.appAppleId, summary.rawEnvironment)
        } else if let token = payload.externalPurchaseToken {
            claimed = (token.bundleId, token.appAppleId, token.inferredEnvironment.rawValue)
        } else if let appData = payload.appData {
            claimed = (appData.bundleId, appData.appAppleId, appData.rawEnvironment)
        } else {
            throw .bundleIdMismatch("the notification carries none of data, summary, externalPurchaseToken or appData, so it names no app")
        }
        let (bundleId, environment) = try checkIdentity(
            bundleId: claimed.bundleId, appAppleId: claimed.appAppleId, checksAppAppleId: true,
            environment: claimed.environment, of: "the notification")
        let binding = Binding(bundleId: bundleId, environment: environment, appAppleId: claimed.appAppleId)

        var transactionInfo: VerifiedPayload<JWSTransactionDecodedPayload>?
        var appTransactionInfo: VerifiedPayload<AppTransaction>?
        if let signed = payload.data?.signedTransactionInfo { transactionInfo = try await nestedTransaction(signed, boundTo: binding) }
        let renewalInfo = try await nestedRenewalInfo(payload.data?.signedRenewalInfo, boundTo: binding)
        if let signed = payload.appData?.signedAppTransactionInfo {
            do throws(VerificationError) {
                appTransactionInfo = try finishAppTransaction(try await verifyJWS(signed, expected: .appTransaction), boundTo: binding)
            } catch {
                throw .nestedInvalid(.signedAppTransactionInfo, error)
            }
        }
        return VerifiedNotification(
            payload: payload, json: outer.payload, signedDate: outer.signedDate, bundleId: bundleId, environment: environment,
            transactionInfo: transactionInfo, renewalInfo: renewalInfo, appTransactionInfo: appTransactionInfo)
    }

    /// A transaction JWS nested in a record, verified and bound to `binding`: its failure is the record's
    /// `nestedInvalid(.signedTransactionInfo, …)`.
    func nestedTransaction(_ signed: String, boundTo binding: Binding) async throws(VerificationError) -> VerifiedPayload<JWSTransactionDecodedPayload> {
        do throws(VerificationError) {
            return try finishTransaction(try await verifyJWS(signed, expected: .transaction), boundTo: binding)
        } catch {
            throw .nestedInvalid(.signedTransactionInfo, error)
        }
    }

    /// The renewal info JWS nested in a record, when there is one, verified and bound to `binding`: its failure is
    /// the record's `nestedInvalid(.signedRenewalInfo, …)`.
    func nestedRenewalInfo(_ signed: String?, boundTo binding: Binding) async throws(VerificationError) -> VerifiedPayload<JWSRenewalInfoDecodedPayload>? {
        guard let signed else { return nil }
        do throws(VerificationError) {
            return try finishRenewalInfo(try await verifyJWS(signed, expected: .renewalInfo), boundTo: binding)
        } catch {
            throw .nestedInvalid(.signedRenewalInfo, error)
        }
    }

    func finishTransaction(_ jws: VerifiedJWS, boundTo binding: Binding?) throws(VerificationError) -> VerifiedPayload<JWSTransactionDecodedPayload> {
        let transaction = try decode(JWSTransactionDecodedPayload.self, jws.payload, what: "the transaction")
        if let binding {
            try require(bundleId: transaction.bundleId, equals: binding.bundleId, of: "the transaction")
            try require(environment: transaction.rawEnvironment, equals: binding.environment, of: "the transaction")
        } else {
            _ = try checkIdentity(
                bundleId: transaction.bundleId, appAppleId: nil, checksAppAppleId: false,
                environment: transaction.rawEnvironment, of: "the transaction")
        }
        return VerifiedPayload(model: transaction, json: jws.payload, signedDate: jws.signedDate)
    }

    func finishRenewalInfo(_ jws: VerifiedJWS, boundTo binding: Binding?) throws(VerificationError) -> VerifiedPayload<JWSRenewalInfoDecodedPayload> {
        let renewalInfo = try decode(JWSRenewalInfoDecodedPayload.self, jws.payload, what: "the renewal info")
        if let binding {
            try require(environment: renewalInfo.rawEnvironment, equals: binding.environment, of: "the renewal info")
        } else {
            // A renewal info names no app: only its environment can be checked, against every configured app.
            let environment = try knownEnvironment(renewalInfo.rawEnvironment, of: "the renewal info")
            guard configuration.apps.contains(where: { $0.environments.contains(environment) }) else {
                throw .environmentMismatch("the renewal info is for \(environment.rawValue), which no configured app accepts")
            }
        }
        return VerifiedPayload(model: renewalInfo, json: jws.payload, signedDate: jws.signedDate)
    }

    func finishAppTransaction(_ jws: VerifiedJWS, boundTo binding: Binding?) throws(VerificationError) -> VerifiedPayload<AppTransaction> {
        let appTransaction = try decode(AppTransaction.self, jws.payload, what: "the app transaction")
        if let binding {
            try require(bundleId: appTransaction.bundleId, equals: binding.bundleId, of: "the app transaction")
            try require(environment: appTransaction.rawReceiptType, equals: binding.environment, of: "the app transaction")
            if let expected = binding.appAppleId, appTransaction.appAppleId != expected,
                binding.environment == .production || appTransaction.appAppleId != nil
            {
                throw .appAppleIdMismatch(
                    "the app transaction is for App Apple ID \(appTransaction.appAppleId.map(String.init) ?? "none"), its notification for \(expected)")
            }
        } else {
            _ = try checkIdentity(
                bundleId: appTransaction.bundleId, appAppleId: appTransaction.appAppleId, checksAppAppleId: true,
                environment: appTransaction.rawReceiptType, of: "the app transaction")
        }
        return VerifiedPayload(model: appTransaction, json: jws.payload, signedDate: jws.signedDate)
    }

    // MARK: - Checks

    /// Finds the configured app for `bundleId` and checks environment and App Apple ID against it.
    func checkIdentity(
        bundleId: String?, appAppleId: Int64?, checksAppAppleId: Bool, environment rawEnvironment: String?, of what: String
    ) throws(VerificationError) -> (bundleId: String, environment: Environment) {
        let environment = try knownEnvironment(rawEnvironment, of: what)
        guard let bundleId else { throw .bundleIdMismatch("\(what) has no bundleId") }
        guard let app = configuration.apps.first(where: { $0.bundleId == nil || $0.bundleId == bundleId }) else {
            let configured = configuration.apps.compactMap(\.bundleId).joined(separator: ", ")
            throw .bundleIdMismatch("bundleId \(UntrustedText.quoted(bundleId)) is not a configured app (configured: \(configured.isEmpty ? "none" : configured))")
        }
        guard app.environments.contains(environment) else {
            let allowed = app.environments.map(\.rawValue).sorted().joined(separator: ", ")
            throw .environmentMismatch("\(what) is for \(environment.rawValue), but \(bundleId) is configured for \(allowed)")
        }
        if checksAppAppleId, let expected = app.appAppleId {
            // Apple's library requires the App Apple ID in Production; in Sandbox we check it when present.
            if environment == .production, appAppleId == nil {
                throw .appAppleIdMismatch("\(what) has no appAppleId; Production notifications must carry \(expected)")
            }
            if let appAppleId, appAppleId != expected {
                throw .appAppleIdMismatch("\(what) is for App Apple ID \(appAppleId), not the configured \(expected)")
            }
        }
        return (bundleId, environment)
    }

    func knownEnvironment(_ rawEnvironment: String?, of what: String) throws(VerificationError) -> Environment {
        guard let rawEnvironment else { throw .environmentMismatch("\(what) has no environment") }
        guard let environment = Environment(rawValue: rawEnvironment) else {
            throw .environmentMismatch(
                "\(what) has environment \(UntrustedText.quoted(rawEnvironment)), not one of Production, Sandbox, Xcode, LocalTesting (case matters)")
        }
        if !environment.isSignedByApple, !configuration.allowLocallySignedEnvironments {
            throw .environmentNotAllowed("\(UntrustedText.quoted(rawEnvironment)) data is signed locally, not by the App Store; it is refused unless local development is enabled")
        }
        return environment
    }

    func require(bundleId: String?, equals expected: String, of what: String) throws(VerificationError) {
        guard bundleId == expected else {
            throw .bundleIdMismatch("\(what) is for bundle \(bundleId.map { UntrustedText.quoted($0) } ?? "none"), its notification for \(UntrustedText.quoted(expected))")
        }
    }

    func require(environment rawEnvironment: String?, equals expected: Environment, of what: String) throws(VerificationError) {
        guard rawEnvironment == expected.rawValue else {
            throw .environmentMismatch("\(what) is for \(rawEnvironment.map { UntrustedText.quoted($0) } ?? "no environment"), its notification for \(expected.rawValue)")
        }
    }

    func decode<T: Decodable>(_ type: T.Type, _ json: JSONObject, what: String) throws(VerificationError) -> T {
        do {
            return try JSONValueDecoder().decode(T.self, from: .object(json))
        } catch let error as DecodingError {
            throw .malformedPayload("\(what) does not match Apple's schema: \(Self.describe(error))")
        } catch {
            throw .malformedPayload("\(what) does not match Apple's schema: \(error)")
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.map(\.stringValue).joined(separator: ".")
        }
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return UntrustedText.escaped("\(path(context)): \(context.debugDescription)", limit: 120)
        case .keyNotFound(let key, let context):
            return UntrustedText.escaped("\(path(context)): missing \(key.stringValue)", limit: 120)
        @unknown default:
            return "\(error)"
        }
    }
}
