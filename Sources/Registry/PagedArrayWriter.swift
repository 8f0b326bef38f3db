import JSON

/// Writes the elements of a JSON array read a page at a time (keyset pages: each read after the place of the last item
/// of the page before), with the commas between them, so a list with no bound (a consent ledger, an installation's
/// events) is never held whole. Several sources may write into one array, one after another.
public struct PagedArrayWriter {
    let pageSize: Int
    private var first = true

    public init(pageSize: Int) { self.pageSize = pageSize }

    /// Writes each page `next` reads to `write`, until a page shorter than `pageSize`.
    public mutating func pages<Item>(
        _ next: (Int64) async throws -> [Item], place: (Item) -> Int64, json: (Item) -> JSONValue,
        to write: ([UInt8]) async throws -> Void
    ) async throws {
        var cursor: Int64 = 0
        while true {
            let page = try await next(cursor)
            guard let last = page.last else { return }
            let elements = page.map { json($0).encoded() }.joined(separator: [UInt8(ascii: ",")])
            try await write((first ? [] : [UInt8(ascii: ",")]) + Array(elements))
            first = false
            guard page.count == pageSize else { return }
            cursor = place(last)
        }
    }
}
