import Foundation
import Registry

/// The requests a linked service sends the registry, signed as the README's linked-service section says: a rotation
/// (its new secret, which the project never sees) and an acknowledgement of one delivery.
public struct LinkedServiceRequest: Sendable {
    public let path: String
    public let headers: [String: String]
    public let body: [UInt8]

    /// `POST /v1/projects/{project}/linkedServices/{service}:rotateSecret`, signed with the service's current secret.
    public static func rotation(
        project: String, service: String, secret: String, time: Int64 = Int64(Date().timeIntervalSince1970)
    ) -> LinkedServiceRequest {
        let body = Array("{}".utf8)
        let signature = WebhookSignature.header(
            secrets: [secret], timestamp: time, body: body, for: .rotation(project: project, service: service))
        return LinkedServiceRequest(
            path: "/v1/projects/\(project)/linkedServices/\(service):rotateSecret",
            headers: ["Registry-Signature": signature, "Content-Type": "application/json"], body: body)
    }

    /// `POST /v1/projects/{project}/deletions/{fid}/acks/{service}` for the delivery `deliveryID`.
    public static func acknowledgement(
        project: String, fid: String, service: String, deliveryID: String, secret: String,
        time: Int64 = Int64(Date().timeIntervalSince1970)
    ) -> LinkedServiceRequest {
        let body = Array("{\"deliveryId\":\"\(deliveryID)\"}".utf8)
        let signature = WebhookSignature.header(
            secrets: [secret], timestamp: time, body: body,
            for: .acknowledgement(project: project, fid: fid, service: service, deliveryID: deliveryID))
        return LinkedServiceRequest(
            path: "/v1/projects/\(project)/deletions/\(fid)/acks/\(service)",
            headers: ["Registry-Signature": signature, "Content-Type": "application/json"], body: body)
    }
}
