import AppStoreNotifications
import ArgumentParser

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `pipelinectl verify`: one JSON verdict per stdin line, in order.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify App Store signed payloads read from stdin, one per line.",
        discussion: """
            Each line is a bare JWS or an HTTP body {"signedPayload": "..."}. For each line one JSON object is printed:
              {"valid": true, "kind": ..., "payload": {...}, "transactionInfo": {...}|null, "renewalInfo": {...}|null, "appTransactionInfo": {...}|null}
              {"valid": false, "error": "<code>", "reason": "<text>"}
            Exit status: 0 when every line was valid, 1 when any was not, 2 on usage errors.
            Identity checks apply only to what is given: without --bundle-id any bundle is accepted, without
            --environment both Production and Sandbox are.
            """
    )

    @Option(name: .customLong("root"), help: "A trusted root certificate (PEM or DER file). Repeatable. Default: the embedded Apple Root CA - G3.")
    var roots: [String] = []

    @Option(help: "The app's bundle id; payloads for other apps are invalid.")
    var bundleId: String?

    @Option(help: "The app's App Apple ID (required to match in Production).")
    var appAppleId: Int64?

    @Option(help: "The only environment to accept: Production or Sandbox.")
    var environment: EnvironmentArgument?

    @Option(help: "What each input is: auto, notification, transaction, renewal, app-transaction.")
    var kind: KindArgument = .auto

    @Option(help: "Longest signed payload accepted, in bytes.")
    var maxPayloadBytes: Int = 256 * 1024

    @Flag(help: "Accept Xcode and LocalTesting data without a signature check (local development only).")
    var allowLocalEnvironments = false

    enum EnvironmentArgument: String, ExpressibleByArgument, CaseIterable {
        case production = "Production"
        case sandbox = "Sandbox"
        case xcode = "Xcode"
        case localTesting = "LocalTesting"
    }

    enum KindArgument: String, ExpressibleByArgument, CaseIterable {
        case auto, notification, transaction, renewal
        case appTransaction = "app-transaction"

        var payloadKind: PayloadKind? { self == .auto ? nil : PayloadKind(rawValue: rawValue) }
    }

    func run() async throws {
        var trustedRoots: [[UInt8]]? = nil
        if !roots.isEmpty {
            trustedRoots = []
            for path in roots {
                guard let bytes = StandardInputLines.readFile(path) else {
                    throw ValidationError("cannot read root certificate file \(path)")
                }
                do {
                    trustedRoots! += try TrustAnchorLoader.certificates(in: bytes)
                } catch {
                    throw ValidationError("\(path): \(error)")
                }
            }
        }
        var environments: Set<Environment> = [.production, .sandbox]
        if let environment { environments = [Environment(rawValue: environment.rawValue)!] }
        if allowLocalEnvironments && self.environment == nil { environments.formUnion([.xcode, .localTesting]) }
        let verifier: SignedPayloadVerifier
        do {
            verifier = try SignedPayloadVerifier(
                configuration: .init(
                    apps: [AppIdentity(bundleId: bundleId, appAppleId: appAppleId, environments: environments)],
                    trustedRoots: trustedRoots,
                    maximumPayloadBytes: maxPayloadBytes,
                    allowLocallySignedEnvironments: allowLocalEnvironments))
        } catch {
            throw ValidationError("\(error)")
        }

        var allValid = true
        var lines = StandardInputLines()
        while let line = lines.next() {
            let report = await VerificationReport.verify(line: line, with: verifier, kind: kind.payloadKind)
            allValid = allValid && report.isValid
            StandardInputLines.writeLine(report.line)
        }
        if !allValid { throw ExitCode(1) }
    }
}

/// Reads stdin line by line without a size limit per line (a hostile 3 MiB line must get its verdict too),
/// and writes whole lines to stdout.
struct StandardInputLines {
    private var buffer: [UInt8] = []
    private var start = 0
    private var atEOF = false

    mutating func next() -> [UInt8]? {
        while true {
            if let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(buffer[start..<newline])
                start = newline + 1
                return line
            }
            if atEOF {
                guard start < buffer.count else { return nil }
                let line = Array(buffer[start...])
                start = buffer.count
                return line
            }
            if start > 0 {
                buffer.removeFirst(start)
                start = 0
            }
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            let count = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if count <= 0 { atEOF = true } else { buffer += chunk[..<count] }
        }
    }

    static func writeLine(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(UInt8(ascii: "\n"))
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if written <= 0 { return }
            offset += written
        }
    }

    static func readFile(_ path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        return bytes
    }
}
