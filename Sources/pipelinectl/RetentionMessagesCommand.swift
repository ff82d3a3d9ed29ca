import AppStoreBudget
import AppStoreNotifications
import AppStoreServerAPI
import ArgumentParser
import Foundation

/// `pipelinectl retention-messages`: the message catalogue of Apple's Retention Messaging API (docs/offers.md).
struct RetentionMessagesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retention-messages",
        abstract: "Manage the retention messages the App Store may show a subscriber about to cancel (Apple's Retention Messaging API).",
        discussion: """
            Messages and images are identified by lowercase UUIDs you choose (RETENTION_RULES_FILE names the messages the
            real-time endpoint answers with). Apple reviews each; Sandbox approves at once. Set the real-time URL to the
            customer API's POST /v1/apps/<bundleId>/retention.
            """,
        subcommands: [UploadImage.self, DeleteImage.self, Images.self, UploadMessage.self, DeleteMessage.self, Messages.self, Default.self, RealtimeURL.self])

    /// Runs `body` with a client whose calls take the console lane's turns in the budget every process shares.
    static func withClient(_ appStore: AppStoreOptions, connection: ConnectionOptions, _ body: @Sendable (AppStoreServerAPIClient) async throws -> Void) async throws {
        _ = try appStore.configuration()
        try await connection.configuration().withStore(logger: toolLogger) { store in
            let api = try appStore.client(budget: SharedRequestBudget(client: store.client, logger: toolLogger), lane: .console) { error, wait in
                FileHandle.standardError.write(Data("waiting \(wait) before retrying: \(error)\n".utf8))
            }
            do {
                try await body(api)
            } catch {
                await api.shutdown()
                throw error
            }
            await api.shutdown()
        }
    }

    /// Apple's two catalogues, which list and delete alike.
    enum Catalogue: String {
        case image, message

        func list(_ api: AppStoreServerAPIClient, bundleId: String) async throws -> [(identifier: String, state: String?)] {
            switch self {
            case .image: try await api.retentionImages(bundleId: bundleId)
            case .message: try await api.retentionMessages(bundleId: bundleId)
            }
        }

        func delete(_ api: AppStoreServerAPIClient, bundleId: String, id: String) async throws {
            switch self {
            case .image: try await api.deleteRetentionImage(bundleId: bundleId, imageIdentifier: id)
            case .message: try await api.deleteRetentionMessage(bundleId: bundleId, messageIdentifier: id)
            }
        }

        /// Prints the catalogue (`imageIdentifier`/`imageState` or `messageIdentifier`/`messageState`, Apple's names).
        func show(_ appStore: AppStoreOptions, connection: ConnectionOptions, json: Bool) async throws {
            let bundleId = appStore.bundleId
            try await withClient(appStore, connection: connection) { api in
                printList(try await list(api, bundleId: bundleId), key: rawValue + "Identifier", stateKey: rawValue + "State", json: json)
            }
        }

        func delete(_ id: String, appStore: AppStoreOptions, connection: ConnectionOptions) async throws {
            let (id, bundleId) = (try uuid(id, option: "--id"), appStore.bundleId)
            try await withClient(appStore, connection: connection) { try await delete($0, bundleId: bundleId, id: id) }
            print("deleted \(rawValue) \(id)")
        }
    }

    static func uuid(_ text: String, option: String) throws -> String {
        guard UUID(uuidString: text) != nil else { throw ValidationError("\(option) must be a UUID, got \(UntrustedText.quoted(text))") }
        return text.lowercased()
    }

    struct UploadImage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "upload-image", abstract: "Upload a PNG image (Upload Image).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The image's identifier (a UUID).") var id: String
        @Option(help: "The PNG file.") var file: String

        func run() async throws {
            let id = try uuid(self.id, option: "--id")
            guard let data = FileManager.default.contents(atPath: file) else { throw ValidationError("--file \(UntrustedText.quoted(file)) cannot be read") }
            guard data.starts(with: [0x89, 0x50, 0x4E, 0x47]) else { throw ValidationError("--file is not a PNG (Apple takes PNG images)") }
            let bundleId = appStore.bundleId
            try await withClient(appStore, connection: connection) { try await $0.uploadRetentionImage(bundleId: bundleId, imageIdentifier: id, png: Array(data)) }
            print("uploaded image \(id) (\(data.count) bytes)")
        }
    }

    struct DeleteImage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete-image", abstract: "Delete an image (Delete Image).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The image's identifier.") var id: String

        func run() async throws { try await Catalogue.image.delete(id, appStore: appStore, connection: connection) }
    }

    struct Images: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "images", abstract: "List the images and their review state (Get Image List).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Flag(help: "Print JSON.") var json = false

        func run() async throws { try await Catalogue.image.show(appStore, connection: connection, json: json) }
    }

    struct UploadMessage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "upload-message", abstract: "Upload a message (Upload Message).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The message's identifier (a UUID).") var id: String
        @Option(help: "Its header (at most 66 characters).") var header: String
        @Option(help: "Its body (at most 144 characters).") var body: String
        @Option(help: "An uploaded image's identifier.") var imageId: String?
        @Option(help: "The image's alternative text (with --image-id).") var altText: String?

        func validate() throws {
            if imageId != nil, altText?.isEmpty != false { throw ValidationError("--image-id goes with --alt-text") }
        }

        func run() async throws {
            let id = try uuid(self.id, option: "--id")
            let image = try imageId.map { (try uuid($0, option: "--image-id"), altText ?? "") }
            let (bundleId, header, body) = (appStore.bundleId, header, self.body)
            try await withClient(appStore, connection: connection) { api in
                try await api.uploadRetentionMessage(bundleId: bundleId, messageIdentifier: id, header: header, body: body, image: image)
            }
            print("uploaded message \(id)")
        }
    }

    struct DeleteMessage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete-message", abstract: "Delete a message (Delete Message).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The message's identifier.") var id: String

        func run() async throws { try await Catalogue.message.delete(id, appStore: appStore, connection: connection) }
    }

    struct Messages: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "messages", abstract: "List the messages and their review state (Get Message List).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Flag(help: "Print JSON.") var json = false

        func run() async throws { try await Catalogue.message.show(appStore, connection: connection, json: json) }
    }

    struct Default: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "default", abstract: "Set or delete the default message of a product in a locale (Configure / Delete Default Message).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "set | delete") var action: String
        @Option(help: "The product.") var productId: String
        @Option(help: "The locale (en-US).") var locale: String
        @Option(help: "The message (with set).") var messageId: String?

        func validate() throws {
            guard action == "set" || action == "delete" else { throw ValidationError("the action is set or delete") }
            if action == "set", messageId == nil { throw ValidationError("set needs --message-id") }
        }

        func run() async throws {
            let (bundleId, productId, locale, action) = (appStore.bundleId, productId, locale, action)
            let message = try messageId.map { try uuid($0, option: "--message-id") }
            try await withClient(appStore, connection: connection) { api in
                if action == "set" {
                    try await api.configureDefaultRetentionMessage(bundleId: bundleId, productId: productId, locale: locale, messageIdentifier: message!)
                } else {
                    try await api.deleteDefaultRetentionMessage(bundleId: bundleId, productId: productId, locale: locale)
                }
            }
            print(action == "set" ? "default message of \(productId) in \(locale): \(message!)" : "deleted the default message of \(productId) in \(locale)")
        }
    }

    struct RealtimeURL: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "realtime-url", abstract: "Set, show or delete the URL Apple calls for real-time retention messages (Configure / Get / Delete Realtime URL).")
        @OptionGroup var appStore: AppStoreOptions
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "set URL | show | delete") var action: String
        @Argument(help: "The URL (with set): https://<customer API>/v1/apps/<bundleId>/retention") var url: String?

        func validate() throws {
            guard ["set", "show", "delete"].contains(action) else { throw ValidationError("the action is set, show or delete") }
            if action == "set" {
                guard let url, url.hasPrefix("https://"), URL(string: url) != nil else { throw ValidationError("set needs an https URL") }
            }
        }

        func run() async throws {
            let (bundleId, action, url) = (appStore.bundleId, action, url)
            try await withClient(appStore, connection: connection) { api in
                switch action {
                case "set":
                    try await api.configureRetentionRealtimeURL(bundleId: bundleId, url: url!)
                    print("real-time URL: \(url!)")
                case "delete":
                    try await api.deleteRetentionRealtimeURL(bundleId: bundleId)
                    print("real-time URL deleted")
                default:
                    do {
                        print(try await api.retentionRealtimeURL(bundleId: bundleId) ?? "(none)")
                    } catch let error as AppStoreServerAPIError where error.httpStatus == 404 {
                        print("(none)")
                    }
                }
            }
        }
    }
}

/// Identifiers and their review states, as text or JSON.
func printList(_ items: [(identifier: String, state: String?)], key: String, stateKey: String, json: Bool) {
    if json {
        printJSON(.array(items.map { .object(JSONObject([key: .string($0.identifier), stateKey: jsonValue($0.state)])) }))
    } else if items.isEmpty {
        print("(none)")
    } else {
        for item in items { print("\(item.identifier)  \(item.state ?? "-")") }
    }
}
