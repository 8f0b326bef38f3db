import Foundation
import JSON

/// Request bodies the clients send, shared by both test tiers.
public enum Bodies {
    /// A web client's registration (`POST …/registrations`), as the JS SDK sends it.
    public static let webRegistration: JSONValue = [
        "web": [
            "endpoint": "https://fcm.googleapis.com/fcm/send/abc", "auth": "c29tZS1hdXRoLWJ5dGVz",
            "p256dh": "BOr0eYQ2xY8",
            "applicationPubKey": nil,
        ]
    ]

    /// A form body (`application/x-www-form-urlencoded`) of `fields`, in order, percent-encoded as the iOS SDK's
    /// `NSURLComponents` does (unreserved characters and `*` as they are).
    public static func form(_ fields: [(String, String)]) -> [UInt8] {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~*")
        return Array(
            fields.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
                .joined(separator: "&").utf8)
    }
}
