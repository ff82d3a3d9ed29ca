import AppStoreNotifications
import Foundation
import TestSigning
import Testing

/// The 2025–26 fields, from the shapes Apple's documentation gives: commitment plans on the transaction and the
/// renewal info, Advanced Commerce price increases; known values typed, unknown ones kept raw and reported.
@Suite("Commitment plans and Advanced Commerce price increases, typed")
struct CommitmentAndAdvancedCommerceTests: MintedSuite {

    func verified(commitment: JSONObject, renewal: JSONObject) async throws -> VerifiedNotification {
        var event = NotificationMinter.SubscriptionEvent.sample(seed: 61, type: "DID_RENEW")
        event.billingPlanType = "MONTHLY"
        event.commitmentInfo = commitment
        event.renewalExtras = renewal
        return try await verifier.verifyNotification(minter.signedNotification(event))
    }

    @Test("TransactionCommitmentInfo, RenewalCommitmentInfo and priceIncreaseInfo decode to their models")
    func typed() async throws {
        let notification = try await verified(
            commitment: JSONObject([
                "billingPeriodNumber": .number(JSONNumber(Int64(3))), "totalBillingPeriods": .number(JSONNumber(Int64(12))),
                "commitmentPrice": .number(JSONNumber(Int64(119_880))), "commitmentExpiresDate": .number(JSONNumber(Int64(1_790_000_000_000))),
            ]),
            renewal: JSONObject([
                "renewalBillingPlanType": .string("MONTHLY"),
                "commitmentInfo": .object(JSONObject([
                    "commitmentAutoRenewProductId": .string("com.example.pro.yearly"), "commitmentAutoRenewStatus": .number(JSONNumber(Int64(1))),
                    "commitmentRenewalBillingPlanType": .string("BILLED_UPFRONT"), "commitmentRenewalDate": .number(JSONNumber(Int64(1_790_000_000_000))),
                    "commitmentRenewalPrice": .number(JSONNumber(Int64(99_990))),
                ])),
                "advancedCommerceInfo": .object(JSONObject([
                    "items": .array([.object(JSONObject([
                        "SKU": .string("sku.pro"),
                        "priceIncreaseInfo": .object(JSONObject([
                            "dependentSKUs": .array([.string("sku.addon")]), "price": .number(JSONNumber(Int64(12_990))), "status": .string("SCHEDULED"),
                        ])),
                    ]))]),
                ])),
            ]))
        let transaction = try #require(notification.transactionInfo?.model.commitment)
        #expect(transaction.billingPeriodNumber == 3 && transaction.totalBillingPeriods == 12 && transaction.commitmentPrice == 119_880)
        #expect(transaction.commitmentExpiresDate == Timestamp(millisecondsSince1970: 1_790_000_000_000))
        let renewal = try #require(notification.renewalInfo?.model)
        #expect(renewal.commitment?.commitmentRenewalBillingPlanType == .billedUpfront && renewal.commitment?.commitmentAutoRenewStatus == .on)
        #expect(renewal.commitment?.commitmentRenewalPrice == 99_990 && renewal.commitment?.commitmentAutoRenewProductId == "com.example.pro.yearly")
        let increases = renewal.advancedCommercePriceIncreases
        #expect(increases.count == 1 && increases.first?.sku == "sku.pro")
        #expect(increases.first?.info.status == .scheduled && increases.first?.info.price == 12_990 && increases.first?.info.dependentSKUs == ["sku.addon"])
        #expect(notification.unknownValues.isEmpty, "\(notification.unknownValues)")
    }

    @Test("values Apple adds later stay raw and are reported as unknown")
    func unknown() async throws {
        let notification = try await verified(
            commitment: JSONObject(["billingPeriodNumber": .number(JSONNumber(Int64(1)))]),
            renewal: JSONObject([
                "commitmentInfo": .object(JSONObject([
                    "commitmentAutoRenewStatus": .number(JSONNumber(Int64(7))), "commitmentRenewalBillingPlanType": .string("QUARTERLY"),
                ])),
                "advancedCommerceInfo": .object(JSONObject([
                    "items": .array([.object(JSONObject(["SKU": .string("sku.pro"), "priceIncreaseInfo": .object(JSONObject(["status": .string("WITHDRAWN")]))]))]),
                ])),
            ]))
        let unknown = Set(notification.unknownValues.map { "\($0.field)=\($0.rawValue)" })
        #expect(unknown == [
            "renewalInfo.commitmentInfo.commitmentAutoRenewStatus=7", "renewalInfo.commitmentInfo.commitmentRenewalBillingPlanType=QUARTERLY",
            "renewalInfo.advancedCommerceInfo.items.priceIncreaseInfo.status=WITHDRAWN",
        ])
        #expect(notification.renewalInfo?.model.commitment?.rawCommitmentRenewalBillingPlanType == "QUARTERLY", "kept as received")
    }
}
