import AppStoreNotifications
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Prints demo material for the README's quick start: a fresh test root (PEM, to a file named by the first
/// argument) and, on stdout, signed notification bodies followed by tampered copies. The keys exist only in
/// this process; nothing private is written anywhere.
@main
struct DemoNotifications {
    static func main() throws {
        let arguments = CommandLine.arguments
        guard arguments.count >= 2 else {
            print("usage: demo-notifications ROOT_PEM_OUTPUT [COUNT]")
            exit(2)
        }
        let count = arguments.count >= 3 ? Int(arguments[2]) ?? 4 : 4
        let authority = try TestCertificateAuthority()
        let chain = try authority.issueChain()
        let pem = try authority.rootCertificate.serializeAsPEM().pemString + "\n"
        guard let file = fopen(arguments[1], "w") else {
            print("cannot write \(arguments[1])")
            exit(1)
        }
        fputs(pem, file)
        fclose(file)

        let minter = NotificationMinter(chain: chain)
        let lifecycle: [(String, String?)] = [("SUBSCRIBED", "INITIAL_BUY"), ("DID_RENEW", nil), ("DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED"), ("EXPIRED", "VOLUNTARY")]
        var bodies: [String] = []
        for index in 0..<count {
            let (type, subtype) = lifecycle[index % lifecycle.count]
            let event = NotificationMinter.SubscriptionEvent.sample(seed: index, signedDate: 1_780_000_000_000 + Int64(index) * 60_000, type: type, subtype: subtype)
            bodies.append(NotificationMinter.body(minter.signedNotification(event)))
        }
        for body in bodies { print(body) }
        // Tampered copies: one character of the signature changed, and a notification of another app.
        if let first = bodies.first {
            var bytes = Array(first.utf8)
            let position = bytes.count - 12  // inside the signature segment, before the closing `"}`
            bytes[position] = bytes[position] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            print(String(decoding: bytes, as: UTF8.self))
        }
        let foreign = NotificationMinter(chain: chain, bundleId: "com.attacker.app")
        print(NotificationMinter.body(foreign.signedNotification(.sample(seed: 99))))
        print(#"{"signedPayload": 42}"#)
    }
}
