import PostgresNIO

extension PostgresClient.Configuration {
    /// Configuration from a `postgres://user[:password]@host[:port]/database` URL (`POSTGRES_URL`), TLS disabled
    /// unless `sslmode=require` is given (then TLS with system trust roots is prefered in production).
    public init(url: String) throws {
        guard let components = URLParts(url) else { throw PostgresURLError(url: url) }
        self.init(host: components.host, port: components.port, username: components.user, password: components.password, database: components.database, tls: .disable)
    }
}

/// `POSTGRES_URL` is not a postgres:// URL.
public struct PostgresURLError: Error, CustomStringConvertible {
    public var url: String
    public var description: String { "POSTGRES_URL must look like postgres://user[:password]@host[:port]/database" }
}

struct URLParts {
    var user: String
    var password: String?
    var host: String
    var port: Int
    var database: String

    init?(_ url: String) {
        var rest = Substring(url)
        guard rest.hasPrefix("postgres://") || rest.hasPrefix("postgresql://") else { return nil }
        rest = rest[rest.index(after: rest.firstIndex(of: "/")!)...].dropFirst()
        guard let at = rest.lastIndex(of: "@") else { return nil }
        let credentials = rest[..<at].split(separator: ":", maxSplits: 1)
        user = credentials.first.map(String.init) ?? "postgres"
        password = credentials.count > 1 ? String(credentials[1]) : nil
        rest = rest[rest.index(after: at)...]
        let hostPart = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(hostPart.count).dropFirst().prefix { $0 != "?" }
        let hostPort = hostPart.split(separator: ":", maxSplits: 1)
        guard let hostName = hostPort.first, !path.isEmpty else { return nil }
        host = String(hostName)
        port = hostPort.count > 1 ? Int(hostPort[1]) ?? 5432 : 5432
        database = String(path)
    }
}
