import ServiceLifecycle

/// Runs `round` every `interval` until the service group shuts down gracefully: the periodic jobs of the services
/// (the worker's healing, gauges and retention, the customer API's token retries) share this one loop. The first
/// round comes after `firstAfter` (at once by default); the shutdown cancels a wait or a round in progress, and no
/// round starts after it.
public func repeatUntilGracefulShutdown(every interval: Duration, firstAfter: Duration = .zero, _ round: @escaping @Sendable () async -> Void) async {
    await cancelWhenGracefulShutdown {
        var wait = firstAfter
        while !Task.isCancelled {
            if wait > .zero {
                try? await Task.sleep(for: wait)
                guard !Task.isCancelled else { return }
            }
            await round()
            wait = interval
        }
    }
}
