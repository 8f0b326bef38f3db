import API
import FuzzSupport

// GCM check-in bodies (`POST /checkin` as application/x-protobuf), from anyone: any bytes decode to fields or a
// typed error, never a trap; decoded fields, written again, decode to the same fields.
Fuzzer.run { bytes in
    guard let fields = try? Protobuf.fields(bytes) else { return }
    var writer = Protobuf.Writer()
    for (number, value) in fields {
        switch value {
        case let .varint(v): writer.varint(number, v)
        case let .fixed64(v): writer.fixed64(number, v)
        case let .bytes(b): writer.bytes(number, b)
        case let .fixed32(v): writer.fixed32(number, v)
        }
    }
    guard let again = try? Protobuf.fields(writer.bytes) else { preconditionFailure("our own encoding did not decode") }
    precondition(again.count == fields.count, "fields lost in a round trip")
    for (a, b) in zip(fields, again) { precondition(a.number == b.number && a.value == b.value, "a field changed") }
}
