import Foundation
import JSON

/// A source's bytes, a chunk at a time (a file or standard input): an import never holds the whole source.
public final class SourceBytes {
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var offset = 0
    private var ended = false
    /// Bytes read so far (progress).
    public private(set) var consumed = 0

    public init(_ handle: FileHandle) { self.handle = handle }

    /// The next byte, nil at the end.
    @inline(__always) func next() -> UInt8? {
        if offset == buffer.count {
            guard !ended else { return nil }
            let chunk = handle.readData(ofLength: 1 << 20)
            guard !chunk.isEmpty else {
                ended = true
                return nil
            }
            buffer = [UInt8](chunk)
            offset = 0
        }
        let byte = buffer[offset]
        offset += 1
        consumed += 1
        return byte
    }
}

/// RFC 4180 CSV: quoted fields with `""` escapes and line breaks inside quotes; CRLF or LF rows; a UTF-8 BOM at the
/// start is dropped. Each row comes with the line it starts on.
struct CSVReader {
    let bytes: SourceBytes
    private(set) var line = 1
    private var started = false
    static let maxFieldBytes = 1 << 20
    /// The most fields a row may have: no export names more than a few dozen columns.
    static let maxFields = 1024

    init(_ bytes: SourceBytes) { self.bytes = bytes }

    /// The next row's fields and the line it starts on; nil at the end.
    mutating func next() throws -> (line: Int, fields: [String])? {
        var fields: [String] = []
        var field: [UInt8] = []
        var quoted = false
        var sawAny = false
        let start = line
        while let byte = bytes.next() {
            if !started {
                started = true
                if byte == 0xEF, bytes.next() == 0xBB, bytes.next() == 0xBF { continue }
            }
            sawAny = true
            if quoted {
                if byte == UInt8(ascii: "\"") {
                    // A quote ends the quoted part unless another follows (an escaped quote).
                    guard let after = bytes.next() else {
                        fields.append(String(decoding: field, as: UTF8.self))
                        return (start, fields)
                    }
                    if after == UInt8(ascii: "\"") {
                        field.append(after)
                        try checkField(field, start)
                        continue
                    }
                    quoted = false
                    if after == UInt8(ascii: ",") {
                        fields.append(String(decoding: field, as: UTF8.self))
                        field.removeAll(keepingCapacity: true)
                        try checkFields(fields, start)
                        continue
                    }
                    if after == 10 || after == 13 {
                        if after == 13, let lf = bytes.next(), lf != 10 { field.append(lf) }
                        line += 1
                        fields.append(String(decoding: field, as: UTF8.self))
                        return (start, fields)
                    }
                    field.append(after)
                    continue
                }
                if byte == 10 { line += 1 }
                field.append(byte)
            } else if byte == UInt8(ascii: "\"") && field.isEmpty {
                quoted = true
            } else if byte == UInt8(ascii: ",") {
                fields.append(String(decoding: field, as: UTF8.self))
                field.removeAll(keepingCapacity: true)
                try checkFields(fields, start)
            } else if byte == 10 {
                line += 1
                if field.last == 13 { field.removeLast() }
                fields.append(String(decoding: field, as: UTF8.self))
                return (start, fields)
            } else {
                field.append(byte)
            }
            try checkField(field, start)
        }
        guard sawAny else { return nil }
        fields.append(String(decoding: field, as: UTF8.self))
        return (start, fields)
    }

    /// Every byte a field gains is checked, escaped quotes too (they skipped the check, so a field of `""` pairs
    /// grew without bound).
    private func checkField(_ field: [UInt8], _ start: Int) throws {
        if field.count > Self.maxFieldBytes { throw ImportError("line \(start): a field longer than 1 MiB") }
    }

    private func checkFields(_ fields: [String], _ start: Int) throws {
        if fields.count > Self.maxFields { throw ImportError("line \(start): more than \(Self.maxFields) fields") }
    }
}

/// JSON values one after another: JSON lines, values concatenated, or the elements of top-level arrays (Django's
/// `dumpdata`, pretty or not). Each value's bytes are cut out by depth and parsed alone, so the source is never held
/// whole; each comes with the line it starts on.
struct JSONValues {
    let bytes: SourceBytes
    private(set) var line = 1
    static let maxValueBytes = 16 << 20

    init(_ bytes: SourceBytes) { self.bytes = bytes }

    /// The next value, or the reason the bytes of one are not JSON (the import goes on after it); nil at the end.
    mutating func next() -> (line: Int, value: Result<JSONValue, ImportError>)? {
        var depth = 0
        var inString = false
        var escaped = false
        var value: [UInt8] = []
        var start = line
        var arrayDepth = 0  // top-level arrays being walked through
        while let byte = bytes.next() {
            if byte == 10 { line += 1 }
            if depth == 0 {
                if byte == UInt8(ascii: "[") && value.isEmpty {
                    arrayDepth += 1
                    continue
                }
                if byte == UInt8(ascii: "]") && arrayDepth > 0 && value.isEmpty {
                    arrayDepth -= 1
                    continue
                }
                if byte == UInt8(ascii: ",") || byte == 32 || byte == 9 || byte == 10 || byte == 13 { continue }
                if byte != UInt8(ascii: "{") {
                    // A scalar at the top, or garbage: up to the end of its line.
                    // Only its first 40 bytes are shown: the rest is skipped, not kept (a line may be a gigabyte).
                    var junk = [byte]
                    while let b = bytes.next(), b != 10 { if junk.count < 40 { junk.append(b) } }
                    line += 1
                    return (line - 1, .failure(ImportError("not a JSON object: \(String(decoding: junk.prefix(40), as: UTF8.self))")))
                }
                start = line
            }
            value.append(byte)
            if value.count > Self.maxValueBytes {
                return (start, .failure(ImportError("a JSON value longer than 16 MiB")))
            }
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                if depth == 0 {
                    do {
                        return (start, .success(try JSONParser.parse(value)))
                    } catch {
                        return (start, .failure(ImportError("not JSON: \(error)")))
                    }
                }
            default: break
            }
        }
        guard !value.isEmpty else { return nil }
        return (start, .failure(ImportError("the source ends inside a JSON value")))
    }
}

/// A source the import cannot read at all, or one row it cannot.
public struct ImportError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
