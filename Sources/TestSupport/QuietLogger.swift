import Logging

/// A logger for tests and their helpers that prints only from `level` up (errors by default; `.critical` for a
/// client whose peer is deliberately away and would report every reconnect), so CI's output tail stays readable.
public func quietLogger(_ label: String, level: Logger.Level = .error) -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = level
    return logger
}
