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

@Suite("Form bodies and header values")
struct FormAndTrimTests {
    static func request(body: [UInt8]) -> HTTPRequest {
        HTTPRequest(method: "POST", target: "/token", version: .http1_1, headers: [:], body: body)
    }

    /// A form has at most HTTPRequest.maxFormItems pairs; a body of more is refused before any pair is built (a
    /// megabyte of `a&a&…` was half a million pairs decoded on the event loop).
    @Test func aFormOfTooManyPairsIsNoFormAndIsRefusedQuickly() {
        let limit = HTTPRequest.maxFormItems
        let fits = (0..<limit).map { "k\($0)=v" }.joined(separator: "&")
        #expect(Self.request(body: Array(fits.utf8)).formItems?.count == limit)
        #expect(Self.request(body: Array((fits + "&extra=1").utf8)).formItems == nil)
        // Empty pairs are skipped, not counted, up to the scan's bound.
        #expect(Self.request(body: Array("a=1&&&&b=2".utf8)).formItems?.map(\.name) == ["a", "b"])
        let flood = [UInt8](repeating: UInt8(ascii: "&"), count: 1 << 20).enumerated().map {
            $0.offset % 2 == 0 ? UInt8(ascii: "a") : $0.element
        }
        let clock = ContinuousClock()
        let took = clock.measure { #expect(Self.request(body: flood).formItems == nil) }
        #expect(took < .milliseconds(500), "\(took)")
    }

    /// A form is at most HTTPRequest.maxFormBytes, decoded by byte: a megabyte value (a kilobyte gzipped) was
    /// walked by Character on the event loop, as a 16 MB array. Decoding: `+` is a space, `%XX` an escape; a malformed
    /// escape or bytes that are not UTF-8 make the body no form, and a query leaves such a pair out.
    @Test func aFormIsBoundedAndDecodedByByte() {
        let value = String(repeating: "v", count: HTTPRequest.maxFormBytes - 2)
        #expect(Self.request(body: Array("a=\(value)".utf8)).formItems?.first?.value.utf8.count == value.utf8.count)
        #expect(Self.request(body: Array("a=\(value)x".utf8)).formItems == nil)
        let decoded = Self.request(body: Array("grant_type=a+b%2Bc&k%C3%A9=%E2%82%AC&flag&empty=".utf8)).formItems
        #expect(decoded?.map(\.name) == ["grant_type", "ké", "flag", "empty"])
        #expect(decoded?.map(\.value) == ["a b+c", "€", "", ""])
        for bad in ["a=%", "a=%2", "a=%zz", "a=%FF", "%C3=1"] {
            #expect(Self.request(body: Array(bad.utf8)).formItems == nil, "\(bad)")
        }
        #expect(Self.request(body: [UInt8(ascii: "a"), UInt8(ascii: "="), 0xFF]).formItems == nil)
        #expect(Self.request(body: []).formItems?.isEmpty == true)
        #expect(HTTPRequest.formItems("a=%zz&b=2+3").map(\.name) == ["b"])
        #expect(HTTPRequest.formItems("a=%zz&b=2+3").map(\.value) == ["2 3"])
    }

    @Test func trimmingIsByByteAndPrefixesIgnoreCase() {
        #expect(" \t a b \t ".trimmingCharacters(in: " \t") == "a b")
        #expect("   ".trimmingCharacters(in: " ") == "")
        #expect("é ".trimmingCharacters(in: " ") == "é")
        #expect("Bearer abc".dropping(caseInsensitivePrefix: "bearer ") == "abc")
        #expect("BEARER abc".dropping(caseInsensitivePrefix: "bearer ") == "abc")
        #expect("Bearerabc".dropping(caseInsensitivePrefix: "bearer ") == nil)
        #expect("Bear".dropping(caseInsensitivePrefix: "bearer ") == nil)
        #expect("key=k".dropping(caseInsensitivePrefix: "key=") == "k")
        // Only ASCII letters fold: `}` (0x7D) is not `]` (0x5D) and 0x1D is not `=`.
        #expect("\u{1D}k".dropping(caseInsensitivePrefix: "=") == nil)
    }
}
