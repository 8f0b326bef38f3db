import FuzzSupport
import JSON

// Any bytes: the parser returns a value or a typed error, never crashes, and never exceeds its depth limit.
// What it accepts survives a round trip through the encoder unchanged.
Fuzzer.run { bytes in
    guard let value = try? JSONParser.parse(bytes) else { return }
    let encoded = value.encoded()
    guard let again = try? JSONParser.parse(encoded) else { preconditionFailure("the encoder wrote unparseable JSON") }
    precondition(again == value, "a value changed in a round trip")
}
