import AppStoreNotifications
import FuzzSupport

/// libFuzzer target: what the customer API and the worker decode of a posted purchase. The input is the POST
/// body's JSON (`customerId`, `signedTransaction`, `signedRenewalInfo`; `$T`/`$R` in a JWS field become the
/// fixture's minted transaction and renewal info, so the fuzzer reaches acceptance), then the purchase record as
/// the customer API produces it and the worker reads it back from the topic (`PurchaseRecordDocument`), then the
/// verification both do.
///
/// Properties: no crash, leak or hang; a customer id is taken only as a canonical lower-case UUID, and canonical
/// stays canonical; a purchase record survives its own encoding exactly (what the API produced is what the
/// worker applies); the record decoder refuses with a code and an escaped reason; a purchase verifies only with
/// JWSs the fixture's key signed, for the route's bundle id; every refusal has a code and an escaped reason.
public func customerPurchaseFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let fixture = MintedFixture.shared
    guard let body = try? StrictJSONParser().parseObject(Array(UnsafeBufferPointer(start: data, count: size))) else { return 0 }

    // The worker's decoder, on a record as it might arrive in the topic.
    do throws(VerificationError) {
        let record = try PurchaseRecordDocument(record: body)
        precondition((try? PurchaseRecordDocument(record: record.json)) == record, "a purchase record does not survive its own encoding")
        precondition(CustomerId.canonical(record.claim.customerId) == record.claim.customerId, "a record's customer id is not canonical")
    } catch {
        checkRefusal(code: error.code, reason: error.reason, "PurchaseRecordDocument(record:)")
    }

    // The API's path: the customer id, the JWS shape, the record, the verification.
    guard let rawCustomer = body["customerId"]?.stringValue, var signedTransaction = body["signedTransaction"]?.stringValue else { return 0 }
    var signedRenewalInfo = body["signedRenewalInfo"]?.stringValue
    if signedTransaction == "$T" { signedTransaction = fixture.transaction }
    if signedRenewalInfo == "$R" { signedRenewalInfo = fixture.renewalInfo }
    guard let customerId = CustomerId.canonical(rawCustomer) else { return 0 }
    precondition(customerId.utf8.count == 36 && customerId == customerId.lowercased() && CustomerId.canonical(customerId) == customerId, "a customer id that is not canonical")
    let bundleId = body["bundleId"]?.stringValue ?? fixture.bundleId
    let document = PurchaseRecordDocument(
        bundleId: bundleId, claim: PurchaseClaim(customerId: customerId, policy: .transfer), signedTransaction: signedTransaction, signedRenewalInfo: signedRenewalInfo)
    precondition((try? PurchaseRecordDocument(record: document.json)) == document, "the API's purchase record does not survive the worker's decoding")
    let minted = fixture.minted
    let verified = runBlocking { () -> Result<Bool, VerificationError> in
        do throws(VerificationError) {
            _ = try await fixture.verifier.verifyPurchase(document)
            return .success(true)
        } catch { return .failure(error) }
    }
    switch verified {
    case .success:
        precondition(minted.contains(signedTransaction) && (signedRenewalInfo.map(minted.contains) ?? true), "FORGERY: a purchase the fixture never signed was accepted")
        precondition(bundleId == fixture.bundleId, "a purchase was accepted for another app's route")
    case .failure(let error):
        checkRefusal(code: error.code, reason: error.reason, "verifyPurchase")
    }
    return 0
}

/// The executable's entry point (SwiftPM makes `FuzzCustomerPurchase_main` the process's `main`): libFuzzer's driver.
@_cdecl("FuzzCustomerPurchase_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    MintedFixture.warmUp()
    return runLibFuzzer(argc, argv) { data, size in customerPurchaseFuzz(data, size) }
}
