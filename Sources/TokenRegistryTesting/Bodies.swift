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
}
