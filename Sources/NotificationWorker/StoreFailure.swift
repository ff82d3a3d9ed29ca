import AppStoreNotifications
import PostgresNIO

/// What a failed batch transaction means: retry the same batch (the database is away, busy or deadlocked), or
/// the data itself is refused and will be refused forever (retrying would stall every partition the member owns,
/// then the next owner's).
enum StoreFailure: Equatable {
    case transient
    /// PostgreSQL refused the data: SQLSTATE and its message (escaped and bounded: it may quote the data).
    case permanent(sqlState: String, message: String)

    /// SQLSTATE classes (the first two characters) whose errors no retry can fix: data exceptions (22, e.g.
    /// 22P05 for `\u0000` in jsonb) and integrity constraint violations (23). Everything else, and every error
    /// that is not the server's (connection closed, deadline passed), is transient: connection (08), transaction
    /// rollback (40: serialization, deadlock), resources (53), operator intervention (57: statement timeout,
    /// shutdown), system (58), object state (55: lock timeout), and the rest (a missing table while a migration
    /// is pending, say) until an operator acts.
    static let permanentClasses: Set<String> = ["22", "23"]

    init(_ error: any Error) {
        if let refused = error as? DataRefused {
            self = .permanent(sqlState: refused.sqlState, message: UntrustedText.escaped(refused.message, limit: 200))
            return
        }
        if let transaction = error as? PostgresTransactionError {
            // The transaction wrapper: what matters is the statement's (or BEGIN's) own error.
            self.init(transaction.closureError ?? transaction.beginError ?? transaction.commitError ?? transaction.rollbackError ?? StoreFailureUnknown())
            return
        }
        guard let error = error as? PSQLError, error.code == .server, let state = error.serverInfo?[.sqlState],
            Self.permanentClasses.contains(String(state.prefix(2)))
        else {
            self = .transient
            return
        }
        let message = [error.serverInfo?[.message], error.serverInfo?[.detail]].compactMap { $0 }.joined(separator: ": ")
        self = .permanent(sqlState: state, message: UntrustedText.escaped(message, limit: 200))
    }
}

private struct StoreFailureUnknown: Error {}
