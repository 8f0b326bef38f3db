import Testing

@testable import API

@Suite("Request ids")
struct RequestIDTests {
    @Test func madeIdsAreSixteenHexDigitsAndDistinct() {
        var seen = Set<String>()
        for _ in 0..<100_000 {
            let id = RequestIDs.next()
            #expect(id.utf8.count == 16)
            #expect(id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) })
            seen.insert(id)
        }
        #expect(seen.count == 100_000)
    }

    /// The mixer is SplitMix64's: its published first outputs for seed 0 (each output mixes the next count).
    @Test func theMixerIsSplitMix64() {
        #expect(RequestIDs.mix(0) == 0xE220_A839_7B1D_CDAF)
        #expect(RequestIDs.mix(0x9E37_79B9_7F4A_7C15) == 0x6E78_9E6A_A1B9_65F4)
    }

    @Test func aCallersIdIsKeptOnlyWhenItIsAShortVisibleToken() {
        #expect(Responder.requestID("abc-123") == "abc-123")
        #expect(Responder.requestID("has space") != "has space")
        #expect(Responder.requestID(String(repeating: "a", count: 65)).utf8.count == 16)
        #expect(Responder.requestID("").utf8.count == 16)
        #expect(Responder.requestID(nil).utf8.count == 16)
    }
}
