import Foundation
import Registry

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Posts deletion notices to linked services with URLSession (libcurl underneath), with a per-request timeout.
public struct URLSessionDeliveryTransport: DeliveryTransport {
    let session: URLSession
    let timeout: TimeInterval

    public init(timeout: TimeInterval = 10) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        configuration.httpMaximumConnectionsPerHost = 8
        session = URLSession(configuration: configuration)
        self.timeout = timeout
    }

    public func post(endpoint: String, body: [UInt8], headers: [(String, String)]) async -> DeliveryResponse {
        guard let url = URL(string: endpoint) else { return .failed("invalid endpoint") }
        var request = URLRequest(url: url, timeoutInterval: timeout)
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        do {
            let (_, response) = try await session.data(for: request)
            guard let http = response as? HTTPURLResponse else { return .failed("not an HTTP response") }
            return .status(http.statusCode)
        } catch {
            return .failed(String(describing: error).prefix(300).description)
        }
    }
}
