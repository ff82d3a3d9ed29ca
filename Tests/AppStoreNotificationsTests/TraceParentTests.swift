import AppStoreNotifications
import Testing

@Suite("TraceParent: the trace id we keep and link, read from W3C traceparent")
struct TraceParentTests {
    @Test("a well-formed traceparent gives its trace id; anything else gives none")
    func traceIds() {
        #expect(TraceParent.traceId("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") == "0af7651916cd43dd8448eb211c80319c")
        for bad in [
            "", "00-0af7651916cd43dd8448eb211c80319c", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
            "00-<script>alert(1)</script>aaaaaaaaaaaaaa-b7ad6b7169203331-01",
        ] {
            #expect(TraceParent.traceId(bad) == nil, "\(bad)")
        }
        #expect(TraceParent.isTraceId("0af7651916cd43dd8448eb211c80319c") && !TraceParent.isTraceId("0af7651916cd43dd8448eb211c80319g"))
    }
}
