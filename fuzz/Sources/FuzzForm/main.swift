import FuzzSupport
import HTTP

// Form bodies and query strings (`/token`, `/register`, `/iid/register`, every `?…`): any text parses to pairs
// without a trap, and the pairs, encoded again, parse back to the same pairs. Percent-decoding never yields what
// its input did not encode.
let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

func encode(_ text: String) -> String {
    var out = ""
    for byte in text.utf8 {
        if unreserved.contains(byte) {
            out.unicodeScalars.append(Unicode.Scalar(byte))
        } else {
            out += "%" + String(byte, radix: 16, uppercase: true).leftPadded
        }
    }
    return out
}

extension String {
    var leftPadded: String { count == 1 ? "0" + self : self }
}

Fuzzer.run { bytes in
    let text = String(decoding: bytes, as: UTF8.self)
    let items = HTTPRequest.formItems(Substring(text))
    let again = HTTPRequest.formItems(Substring(items.map { encode($0.name) + "=" + encode($0.value) }.joined(separator: "&")))
    precondition(items.count == again.count, "pairs lost in a round trip")
    for (a, b) in zip(items, again) { precondition(a == b, "a pair changed in a round trip") }
    if let decoded = PercentDecoding.decode(Substring(text)) {
        precondition(decoded.utf8.count <= text.utf8.count, "decoding grew the text")
    }
}
