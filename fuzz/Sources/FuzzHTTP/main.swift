import FuzzSupport
import HTTP

// Any bytes as a connection's input (pipelined requests, chunked bodies, gzip bodies): the parser yields requests or
// one error and never crashes. The first byte picks a read size; the requests, and whether the input is refused, must be
// the same whether it arrives whole or in reads of that size, since a client chooses how its bytes are split. Which
// status a refusal carries may differ: a head that is both too long and holds a NUL is refused by whichever check its
// bytes reach first (414 or 400), and the connection closes either way. Whatever the reads, the parser never holds more
// than a few kilobytes it has already parsed (docs/security.md, class 18).
struct Outcome: Equatable {
    var requests: [String] = []
    var refused = false
}

func drain(_ parser: inout HTTPParser, into outcome: inout Outcome) -> Bool {
    while true {
        switch parser.next() {
        case .needMore: return true
        case .expectContinue: continue
        case let .request(request):
            outcome.requests.append(
                "\(request.method) \(request.target) \(request.body.count) \(request.body.hashValue)")
        case let .error(error):
            precondition(
                (400...499).contains(error.status) || error.status == 505, "a parse error is a 4xx or 505: \(error)")
            outcome.refused = true
            return false
        }
    }
}

var limits = HTTPLimits()
limits.maxRequestLineBytes = 512
limits.maxHeaderBytes = 2048
limits.maxHeaderCount = 20
limits.maxBodyBytes = 64 * 1024

Fuzzer.run { bytes in
    guard let first = bytes.first else { return }
    let input = bytes.dropFirst()
    let step = Int(first % 16) + 1
    var whole = HTTPParser(limits: limits)
    var wholeOutcome = Outcome()
    whole.append(input)
    _ = drain(&whole, into: &wholeOutcome)
    var split = HTTPParser(limits: limits)
    var splitOutcome = Outcome()
    var offset = input.startIndex
    while offset < input.endIndex {
        let end = min(offset + step, input.endIndex)
        split.append(input[offset..<end])
        precondition(split.parsedBytesHeld < 4096, "the parser holds \(split.parsedBytesHeld) bytes it has parsed")
        offset = end
        guard drain(&split, into: &splitOutcome) else { break }
    }
    precondition(
        wholeOutcome == splitOutcome, "events depend on how the bytes were split: \(wholeOutcome) \(splitOutcome)")
}
