import Foundation
import JSON
import Synchronization
import Testing

@testable import API

/// The writes a sink received, in order.
private final class Writes: Sendable {
    let all = Mutex<[[UInt8]]>([])
    var sink: @Sendable ([UInt8]) -> Void { { [self] bytes in all.withLock { $0.append(bytes) } } }
    var count: Int { all.withLock { $0.count } }
    var text: String { all.withLock { String(decoding: $0.joined(), as: UTF8.self) } }
}

@Suite("Request log buffer")
struct LogBufferTests {
    @Test func requestLinesWaitUntilAnotherLineAndGoOutFirstInOneWrite() {
        let writes = Writes()
        let logger = Logger.buffered(level: .info, flushInterval: .seconds(3600), sink: writes.sink)
        for n in 0..<3 { logger.request(id: "r\(n)", method: "GET", route: "/healthz", status: 200, microseconds: 5) }
        #expect(writes.count == 0)
        logger.warning("something else")
        #expect(writes.count == 1)
        let lines = writes.text.split(separator: "\n").map(String.init)
        #expect(lines.count == 4)
        #expect(lines.prefix(3).allSatisfy { $0.contains(#""msg":"request""#) } && lines[3].contains("something else"))
        logger.close()
    }

    @Test func aFullBufferIsWrittenWithoutWaiting() {
        let writes = Writes()
        let logger = Logger.buffered(level: .info, flushInterval: .seconds(3600), sink: writes.sink)
        var appended = 0
        while writes.count == 0 && appended < 10_000 {
            logger.request(
                id: "x", method: "POST", route: "/v1/projects/{project}/installations", status: 200,
                microseconds: 1234)
            appended += 1
        }
        #expect(writes.count == 1)
        #expect(writes.all.withLock { $0[0].count } >= LogBuffer.capacity)
        logger.close()
    }

    @Test func theTimerWritesWhatGathered() async throws {
        let writes = Writes()
        let logger = Logger.buffered(level: .info, flushInterval: .milliseconds(100), sink: writes.sink)
        logger.request(id: "t", method: "GET", route: "/readyz", status: 503, microseconds: 0)
        let deadline = ContinuousClock.now + .seconds(5)
        while writes.count == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(writes.text.contains(#""route":"/readyz""#))
        logger.close()
    }

    @Test func closeWritesTheRest() {
        let writes = Writes()
        let logger = Logger.buffered(level: .info, flushInterval: .seconds(3600), sink: writes.sink)
        logger.request(id: "last", method: "GET", route: "/healthz", status: 200, microseconds: 1)
        logger.close()
        #expect(writes.text.contains(#""requestId":"last""#))
    }

    /// The hand-built line is the JSON the generic encoder would write: escaped where a client chose the text.
    @Test func theRequestLineIsJSONWithEveryField() throws {
        let writes = Writes()
        let logger = Logger(level: .info, sink: writes.sink)
        logger.request(id: #"a"b\c"#, method: "OTHER", route: "unmatched", status: 404, microseconds: 12_345_678)
        let object = try JSONParser.parse(Array(writes.text.utf8.dropLast()))
        #expect(object["requestId"]?.stringValue == #"a"b\c"#)
        #expect(object["method"]?.stringValue == "OTHER" && object["route"]?.stringValue == "unmatched")
        #expect(object["status"]?.int64Value == 404 && object["level"]?.stringValue == "info")
        #expect(writes.text.contains(#""durationMs":12345.678}"#))
        let time = try #require(object["time"]?.stringValue)
        #expect(time.count == 24 && time.hasSuffix("Z") && time.contains("T"))
    }

    @Test func aboveInfoNoRequestLineIsBuilt() {
        let writes = Writes()
        let logger = Logger.buffered(level: .warning, flushInterval: .seconds(3600), sink: writes.sink)
        logger.request(id: "x", method: "GET", route: "/healthz", status: 200, microseconds: 1)
        logger.close()
        #expect(writes.count == 0)
    }

    @Test func digitsArePaddedAndExact() {
        for (value, width, text) in [(0, 1, "0"), (7, 3, "007"), (1234, 2, "1234"), (2026, 4, "2026"), (999, 3, "999")]
        {
            var out = [UInt8]()
            Logger.appendDigits(value, width: width, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == text)
        }
    }
}
