/// The signing half of the test material (a test PKI, minted notifications and lifecycles) lives in `TestSigning`,
/// which needs nothing but the core and swift-crypto/swift-certificates, so the fuzz targets (Fuzz/) can link it
/// without the HTTP stack; tests and tools keep importing `TestSupport` alone.
@_exported import TestSigning
