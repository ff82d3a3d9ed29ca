/// [AppTransaction](https://developer.apple.com/documentation/appstoreserverapi/jwsapptransactiondecodedpayload):
/// the purchase of the app itself, carried by `appData.signedAppTransactionInfo`.
public struct AppTransaction: Sendable, Hashable, Codable {
    /// The environment the receipt was issued in (`Production`, `Sandbox`, ...).
    public var rawReceiptType: String?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var applicationVersion: String?
    public var versionExternalIdentifier: Int64?
    /// The date this app transaction was signed: certificate validity is evaluated at it.
    public var receiptCreationDate: Timestamp?
    public var originalPurchaseDate: Timestamp?
    public var originalApplicationVersion: String?
    public var deviceVerification: String?
    public var deviceVerificationNonce: String?
    public var preorderDate: Timestamp?
    public var appTransactionId: String?
    public var rawOriginalPlatform: String?

    public var receiptType: Environment? { rawReceiptType.flatMap(Environment.init(rawValue:)) }
    public var originalPlatform: PurchasePlatform? { rawOriginalPlatform.flatMap(PurchasePlatform.init(rawValue:)) }

    enum CodingKeys: String, CodingKey {
        case rawReceiptType = "receiptType"
        case appAppleId, bundleId, applicationVersion, versionExternalIdentifier, receiptCreationDate
        case originalPurchaseDate, originalApplicationVersion, deviceVerification, deviceVerificationNonce
        case preorderDate, appTransactionId
        case rawOriginalPlatform = "originalPlatform"
    }
}
