import ArgumentParser

/// The operator's tool. Each subcommand reads its inputs, calls the library, and prints.
@main
struct PipelineCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipelinectl",
        abstract: "Operate the App Store Server Notifications V2 pipeline.",
        subcommands: [VerifyCommand.self]
    )
}
