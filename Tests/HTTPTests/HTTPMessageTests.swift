import Testing

@testable import HTTP

@Suite("Headers and responses")
struct HTTPMessageTests {
    @Test func headerNamesMatchInAnyCase() {
        var headers: HTTPHeaders = ["Content-Type": "a/b", "x-one": "1"]
        headers.add(name: "X-ONE", value: "2")
        headers.add(name: "Ünïcode", value: "u")
        #expect(headers["content-type"] == "a/b")
        #expect(headers["CONTENT-type"] == "a/b")
        #expect(headers.values("x-one") == ["1", "2"])
        #expect(headers.values("X-One") == ["1", "2"])
        #expect(headers["ünïcode"] == "u")
        #expect(headers["ÜNÏCODE"] == "u")
        #expect(headers.fields.map(\.name) == ["content-type", "x-one", "x-one", "ünïcode"])
        headers.replaceOrAdd(name: "X-One", value: "3")
        #expect(headers.values("x-one") == ["3"])
        #expect(headers["missing"] == nil)
    }

    @Test func decimalsAreWrittenWithoutInterpolation() {
        for value in [0, 7, 9, 10, 99, 100, 200, 404, 65_536, 1_234_567_890, Int.max] {
            var out: [UInt8] = []
            HTTPResponse.appendDecimal(value, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == String(value))
        }
    }

    @Test func serializedResponsesCarryStatusLengthAndConnection() {
        let response = HTTPResponse(
            status: 201, headers: ["X-A": "b", "Content-Length": "99"], body: Array("hello".utf8))
        let kept = String(decoding: response.serialized(version: .http1_1, keepAlive: true), as: UTF8.self)
        #expect(kept == "HTTP/1.1 201 Created\r\nx-a: b\r\ncontent-length: 5\r\n\r\nhello")
        let closed = String(
            decoding: response.serialized(version: .http1_0, keepAlive: false, omitBody: true), as: UTF8.self)
        #expect(closed == "HTTP/1.0 201 Created\r\nx-a: b\r\ncontent-length: 5\r\nconnection: close\r\n\r\n")
        let odd = String(
            decoding: HTTPResponse(status: 299).serialized(version: .http1_1, keepAlive: true), as: UTF8.self)
        #expect(odd.hasPrefix("HTTP/1.1 299 Status 299\r\n"))
    }
}
