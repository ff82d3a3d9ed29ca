import AppStoreNotifications
import TestSupport
import Testing

@Suite("Identity and models")
struct IdentityAndModelTests {
    static let signedDate = TestDates.milliseconds("2026-07-07T07:07:07Z")

    @Test("one verifier serves several apps in both environments")
    func registry() async throws {
        let authority = try TestCertificateAuthority()
        let chain = try authority.issueChain()
        let verifier = try SignedPayloadVerifier(
            configuration: .init(
                apps: [
                    AppIdentity(bundleId: "com.example.one", appAppleId: 1, environments: [.production, .sandbox]),
                    AppIdentity(bundleId: "com.example.two", appAppleId: 2, environments: [.sandbox]),
                ],
                trustedRoots: [authority.rootDER]))
        let event = NotificationMinter.SubscriptionEvent.sample(seed: 5, signedDate: Self.signedDate)
        for (bundle, appId, environment) in [("com.example.one", Int64(1), Environment.production), ("com.example.one", 1, .sandbox), ("com.example.two", 2, .sandbox)] {
            let minter = NotificationMinter(chain: chain, bundleId: bundle, appAppleId: appId, environment: environment)
            let verified = try await verifier.verifyNotification(minter.signedNotification(event))
            #expect(verified.bundleId == bundle && verified.environment == environment)
        }
        let refused: [(String, Int64, Environment, String)] = [
            ("com.example.two", 2, .production, "environmentMismatch"),
            ("com.example.three", 3, .production, "bundleIdMismatch"),
            ("com.example.one", 2, .production, "appAppleIdMismatch"),
        ]
        for (bundle, appId, environment, code) in refused {
            let minter = NotificationMinter(chain: chain, bundleId: bundle, appAppleId: appId, environment: environment)
            await #expect(throws: VerificationError.self) { try await verifier.verifyNotification(minter.signedNotification(event)) }
            do {
                _ = try await verifier.verifyNotification(minter.signedNotification(event))
            } catch {
                #expect(error.code == code)
            }
        }
    }

    @Test("Xcode data is refused unless local development is enabled")
    func localEnvironments() async throws {
        let authority = try TestCertificateAuthority()
        let minter = NotificationMinter(chain: try authority.issueChain(), environment: .xcode)
        let jws = minter.signedNotification(.sample(seed: 8, signedDate: Self.signedDate))
        let strict = try SignedPayloadVerifier(configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: nil)], trustedRoots: [authority.rootDER]))
        do {
            _ = try await strict.verifyNotification(jws)
            Issue.record("Xcode data accepted by default")
        } catch {
            #expect(error.code == "environmentNotAllowed")
        }
        let local = try SignedPayloadVerifier(
            configuration: .init(
                apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: nil, environments: [.xcode])], trustedRoots: [authority.rootDER],
                allowLocallySignedEnvironments: true))
        #expect(try await local.verifyNotification(jws).environment == .xcode)
    }

    @Test("unknown notification types and enum values are kept raw, never an error")
    func forwardCompatible() async throws {
        let authority = try TestCertificateAuthority()
        let chain = try authority.issueChain()
        let minter = NotificationMinter(chain: chain)
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 9, signedDate: Self.signedDate, type: "SOMETHING_NEW", subtype: "ALSO_NEW")
        event.inAppOwnershipType = "GIFTED"
        event.status = 9
        var payload = minter.payload(event)
        payload["futureField"] = .object(JSONObject(["x": .number(JSONNumber(literal: "123456789012345678901234567890"))]))
        let verifier = try SignedPayloadVerifier(configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
        let verified = try await verifier.verifyNotification(chain.sign(payload))
        #expect(verified.payload.notificationType == nil)
        #expect(verified.payload.rawNotificationType == "SOMETHING_NEW")
        #expect(verified.payload.rawSubtype == "ALSO_NEW")
        #expect(verified.payload.data?.status == nil && verified.payload.data?.rawStatus == 9)
        #expect(verified.transactionInfo?.model.rawInAppOwnershipType == "GIFTED")
        #expect(verified.json["futureField"]?.objectValue?["x"] == .number(JSONNumber(literal: "123456789012345678901234567890")))
    }

    @Test("every documented notification type and subtype has a typed value")
    func enumerations() {
        #expect(NotificationTypeV2.allCases.count == 23)
        #expect(Subtype.allCases.count == 19)  // with CREATED and ACTIVE_TOKEN_REMINDER (external purchase tokens)
        #expect(NotificationTypeV2(rawValue: "ONE_TIME_CHARGE") == .oneTimeCharge)
        #expect(SubscriptionStatus(rawValue: 5) == .revoked)
        #expect(OfferType(rawValue: 4) == .winBackOffer)
        #expect(OfferDiscountType(rawValue: "ONE_TIME") == .oneTime)
    }

    @Test("the embedded Apple root matches Apple's published fingerprint")
    func appleRoot() throws {
        let der = try AppleRootCertificate.derBytes
        #expect(der.count == 583)
        #expect(try TrustAnchorLoader.certificates(in: der) == [der])
    }

    @Test("request bodies: shape only, strictly")
    func requestBodies() throws {
        #expect(try ResponseBodyV2.parse(body: Array(#"{"signedPayload":"a.b.c","extra":1}"#.utf8)).signedPayload == "a.b.c")
        let cases: [(String, String)] = [
            ("", "invalidJSON"), ("[]", "notAnObject"), ("{}", "missingSignedPayload"), (#"{"signedPayload":1}"#, "signedPayloadNotString"),
            (#"{"signedPayload":"x","signedPayload":"a.b.c"}"#, "invalidJSON"),
        ]
        for (body, code) in cases {
            #expect(throws: RequestBodyError.self) { try ResponseBodyV2.parse(body: Array(body.utf8)) }
            do { _ = try ResponseBodyV2.parse(body: Array(body.utf8)) } catch { #expect(error.code == code, "\(body)") }
        }
        #expect(throws: RequestBodyError.self) { try ResponseBodyV2.parse(body: Array(repeating: 0x20, count: 300_000)) }
        try ResponseBodyV2.checkCompactJWSShape("eyJ.eyJ.sig")
        for bad in ["", "a.b", "a.b.c.d", "a..c", "a.b.c=", " a.b.c", "a.b.c\n", "a+b.c.d"] {
            #expect(throws: RequestBodyError.self, "\(bad)") { try ResponseBodyV2.checkCompactJWSShape(bad) }
        }
    }
}
