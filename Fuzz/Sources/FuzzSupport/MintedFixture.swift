import AppStoreNotifications
import Dispatch
import TestSigning

/// What the verifier targets combine the fuzzer's bytes with: a test PKI minted in this process (its keys never
/// leave it), one notification signed by it (with its nested transaction and renewal info), and a verifier that
/// trusts only that root. Because the only key that can sign for the root lives here and signs nothing else, the
/// one notification and its two nested JWSs are the only things the verifier may ever accept: anything else
/// accepted is a forgery, which the targets treat as a property violation.
public struct MintedFixture: Sendable {
    public let verifier: SignedPayloadVerifier
    public let bundleId: String
    public let notification: String
    public let transaction: String
    public let renewalInfo: String
    /// The notification's three segments, and its header and payload decoded (the exact bytes that were signed).
    public let segments: [String]
    public let header: [UInt8]
    public let payload: [UInt8]
    /// The x5c entries (standard base64 DER: leaf, intermediate, root).
    public let x5c: [String]
    /// Every JWS the fixture's key signed (the notification, the transaction and renewal info nested in it, and the
    /// two signed on their own): the only strings the verifier may accept.
    public var minted: Set<String> {
        var all: Set<String> = [notification, transaction, renewalInfo]
        if case .object(let object)? = try? StrictJSONParser().parse(payload), case .object(let data)? = object["data"] {
            for key in ["signedTransactionInfo", "signedRenewalInfo"] { if let nested = data[key]?.stringValue { all.insert(nested) } }
        }
        return all
    }

    public static let shared: MintedFixture = {
        do {
            let authority = try TestCertificateAuthority()
            let chain = try authority.issueChain()
            let minter = NotificationMinter(chain: chain)
            let event = NotificationMinter.lifecycleEvents(subscriptions: 1)[0]
            let notification = minter.signedNotification(event)
            let verifier = try SignedPayloadVerifier(
                configuration: .init(apps: [AppIdentity(bundleId: minter.bundleId, appAppleId: minter.appAppleId)], trustedRoots: [authority.rootDER]))
            let segments = notification.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            return MintedFixture(
                verifier: verifier, bundleId: minter.bundleId, notification: notification,
                transaction: chain.sign(minter.transaction(event)), renewalInfo: chain.sign(minter.renewalInfo(event)),
                segments: segments, header: Base64.decode(segments[0], alphabet: .url) ?? [], payload: Base64.decode(segments[1], alphabet: .url) ?? [],
                x5c: chain.x5c)
        } catch {
            fatalError("cannot mint the fuzz fixture: \(error)")
        }
    }()

    /// Mints the fixture and verifies it once before the first input, so what lives as long as the process (the
    /// keys, the verifier's chain and header caches) is not allocated inside an input's run, where LeakSanitizer
    /// would count it as that input's leak.
    public static func warmUp() {
        let fixture = shared
        let accepted = runBlocking { (try? await fixture.verifier.verifyNotification(fixture.notification)) != nil }
        precondition(accepted, "the fixture's own notification does not verify: the target would test nothing")
        _ = fixture.minted
    }

    /// The fixture's header text with x5c entry `index` replaced by `replacement` (the rest byte for byte).
    public func header(replacingCertificate index: Int, with replacement: String) -> [UInt8] {
        let text = String(decoding: header, as: UTF8.self)
        return Array(text.replacingOccurrences(of: "\"" + x5c[index] + "\"", with: "\"" + replacement + "\"").utf8)
    }
}

extension String {
    /// Plain replacement without Foundation (the fuzz targets keep to the core's dependencies).
    public func replacingOccurrences(of target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var result = ""
        var rest = self[...]
        while let range = rest.firstRange(of: target) {
            result += rest[..<range.lowerBound] + replacement
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}

/// Hands a result from the task to the waiting thread (written before the semaphore's signal, read after its wait).
final class ResultBox<T>: @unchecked Sendable { var value: T? }

/// Signals when it is destroyed: the task's closure context (which holds it) has been released, so the task has
/// finished entirely, its frames and captures included.
final class TaskFinished: @unchecked Sendable {
    let semaphore: DispatchSemaphore
    init(_ semaphore: DispatchSemaphore) { self.semaphore = semaphore }
    deinit { semaphore.signal() }
}

/// Runs async work to completion from libFuzzer's synchronous callback.
///
/// Returns only after the task is wholly torn down, not merely after it produced its value: libFuzzer checks each
/// input for leaks (mallocs against frees, then LeakSanitizer) right after the callback returns, and a task still
/// releasing its captures on a cooperative thread at that moment is seen as a leak that no input repeats (one
/// fresh-clone run reported a `VerificationError` from `verifiedLeafKey` that way; 30 runs of the same input did not).
/// The value is moved out of the box, so nothing of it stays with the task.
public func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let box = ResultBox<T>()
    let finished = DispatchSemaphore(value: 0)
    do {
        let sentinel = TaskFinished(finished)
        Task {
            box.value = await body()
            withExtendedLifetime(sentinel) {}
        }
    }
    finished.wait()
    defer { box.value = nil }
    return box.value!
}

/// A refusal a person (or a log) will see: a code, and a reason that is bounded and carries no raw control characters.
public func checkRefusal(code: String, reason: String, _ context: StaticString) {
    precondition(!code.isEmpty && code.utf8.allSatisfy { (0x21...0x7e).contains($0) }, "\(context): a refusal without a printable code")
    precondition(!reason.isEmpty && reason.utf8.count <= 4096, "\(context): a refusal reason that is empty or unbounded")
    precondition(!reason.unicodeScalars.contains { ($0.value < 0x20 && $0 != "\n") || (0x7f...0x9f).contains($0.value) }, "\(context): a refusal reason with raw control characters")
}
