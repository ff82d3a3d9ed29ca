import AppStoreNotifications
import ArgumentParser
import Console
import Foundation

/// `pipelinectl operators add|list|disable|enable|remove|reset-password`: who may sign in to the console.
struct OperatorsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "operators", abstract: "Manage the console's operators (passwords are shown once and stored as bcrypt hashes).",
        subcommands: [Add.self, List.self, Change<Disable>.self, Change<Enable>.self, Change<Remove>.self, ResetPassword.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "add", abstract: "Add an operator and print a one-time password once.")

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The operator's email (their sign-in name).") var email: String
        @Option(help: "viewer (reads), support (also acts: re-drive, reconcile), admin.") var role = "viewer"
        @Flag(help: "Print {\"email\", \"role\", \"password\"}.") var json = false

        func validate() throws {
            guard OperatorRole(rawValue: role) != nil else { throw ValidationError("--role must be viewer, support or admin, not \(UntrustedText.quoted(role))") }
            guard email.contains("@"), (3...254).contains(email.utf8.count) else { throw ValidationError("--email must be an email address") }
        }

        func run() async throws {
            let password = OperatorPassword.generate()
            let hash = OperatorPassword.hash(password)
            let (email, role) = (email.lowercased(), OperatorRole(rawValue: role)!)
            let added = try await connection.withMigratedStore { store in try await store.console.addOperator(email: email, role: role, passwordHash: hash) }
            guard added else { throw ToolFailure("an operator \(email) exists already: `pipelinectl operators reset-password --email \(email)` gives a new password") }
            printCreated(
                json: json, JSONObject(["email": .string(email), "role": .string(role.rawValue), "password": .string(password)]),
                summary: "added \(email) (\(role.rawValue))", secret: ("one-time password", password))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the operators (never their passwords).")

        @OptionGroup var listing: ListingOptions

        func run() async throws {
            try await listing.list { store in
                try await store.console.operators()
            } object: { account in
                JSONObject([
                    "email": .string(account.email), "role": .string(account.role.rawValue), "disabled": .bool(account.disabled),
                    "createdAt": .string(listedTime(account.createdAt)), "lastLoginAt": account.lastLoginAt.map { .string(listedTime($0)) } ?? .null,
                ])
            } line: { account in
                "\(account.email)  \(account.role.rawValue)\(account.disabled ? "  disabled" : "")  last sign-in \(listedTime(account.lastLoginAt))"
            }
        }
    }

    /// `disable`, `enable`, `remove`: one change to one operator, by email.
    struct Change<Kind: OperatorChangeKind>: AsyncParsableCommand {
        static var configuration: CommandConfiguration { CommandConfiguration(commandName: Kind.name, abstract: Kind.abstract) }
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The operator's email.") var email: String

        func run() async throws { try await OperatorsCommand.change(connection, email: email, Kind.change, done: Kind.done) }
    }

    static func change(_ connection: ConnectionOptions, email: String, _ change: ConsoleStore.OperatorChange, done: String) async throws {
        let found = try await connection.withMigratedStore { store in try await store.console.updateOperator(email: email, change) }
        guard found else { throw ToolFailure("no operator \(UntrustedText.quoted(email, limit: 254))") }
        print("\(email.lowercased()): \(done)")
    }

    struct ResetPassword: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "reset-password", abstract: "Give an operator a new one-time password (printed once); their sessions end.")
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The operator's email.") var email: String

        func run() async throws {
            let password = OperatorPassword.generate()
            try await OperatorsCommand.change(connection, email: email, .password(hash: OperatorPassword.hash(password)), done: "new password, sessions ended")
            print("one-time password (shown once): \(password)")
        }
    }
}

/// What `pipelinectl operators disable|enable|remove` does.
protocol OperatorChangeKind {
    static var name: String { get }
    static var abstract: String { get }
    static var change: ConsoleStore.OperatorChange { get }
    static var done: String { get }
}

enum Disable: OperatorChangeKind {
    static let (name, abstract, change, done) = ("disable", "Disable an operator: their sessions end at once.", ConsoleStore.OperatorChange.disable, "disabled, sessions ended")
}

enum Enable: OperatorChangeKind {
    static let (name, abstract, change, done) = ("enable", "Enable a disabled operator again.", ConsoleStore.OperatorChange.enable, "enabled")
}

enum Remove: OperatorChangeKind {
    static let (name, abstract, change, done) = ("remove", "Remove an operator (the audit keeps their actions).", ConsoleStore.OperatorChange.remove, "removed")
}
