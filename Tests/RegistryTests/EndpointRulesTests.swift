import Registry
import Testing
import TokenRegistryTesting

/// Which hosts a linked service may name: every spelling of an internal address is recognised.
@Suite("Endpoint rules")
struct EndpointRulesTests {
    @Test(arguments: [
        "127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.1", "[::1]", "::1", "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]", "169.254.169.254", "10.0.0.5", "172.16.0.1",
        "172.31.255.255", "192.168.1.1", "100.64.0.1", "0.0.0.0", "0", "224.0.0.1", "255.255.255.255", "[fc00::1]",
        "[fd12:3456::1]", "[fe80::1]", "[ff02::1]", "[::]", "[fe80::1%25eth0]",
        // The rest of the IANA special-purpose registries, and IPv4 inside IPv6 (NAT64, 6to4) or Teredo.
        "192.88.99.1", "192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.7", "203.0.113.9", "240.0.0.1",
        "[64:ff9b::a00:1]", "[64:ff9b:1::808:808]", "[2002:7f00:1::1]", "[2002:a00:1::]", "[2002:c0a8:101::1]",
        "[2001::1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]", "[2001:db8::1]", "[3fff::1]", "[100::1]",
        "[5f00::1]", "[fec0::1]", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]",
    ])
    func internalAddressesAreRecognisedInEverySpelling(_ host: String) throws {
        let address = try #require(IPAddress.literal(host), "\(host) is an address literal")
        #expect(!address.isPublic, "\(host) → \(address)")
    }

    @Test(arguments: [
        "93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "[2606:4700::1111]", "1.1.1.1", "[64:ff9b::808:808]",
        "[2002:808:808::1]", "[2a00:1450:4001::200e]", "192.88.100.1",
    ])
    func publicAddressesPass(_ host: String) throws {
        #expect(try #require(IPAddress.literal(host)).isPublic)
    }

    @Test func namesAreNotLiterals() {
        for host in ["crm.example", "localhost", "1.2.3.4.example", "0x7f.example"] {
            #expect(IPAddress.literal(host) == nil)
        }
    }

    @Test func namesAreJudgedByEveryAddressTheyResolveTo() async throws {
        let resolver = StaticResolver([
            "public.example": [.v4(0x5db8_d822)], "inside.example": [.v4(0x0a00_0001)],
            "mixed.example": [.v4(0x5db8_d822), .v4(0x7f00_0001)], "localhost": [.v4(0x7f00_0001)],
        ])
        let policy = EndpointPolicy()
        #expect(try await policy.addresses(of: Endpoint("https://public.example/hook"), resolver: resolver, for: "p").count == 1)
        for host in ["inside.example", "mixed.example", "localhost"] {
            await #expect(throws: RegistryError.self) {
                _ = try await policy.addresses(of: Endpoint("https://\(host)/hook"), resolver: resolver, for: "p")
            }
        }
        let open = EndpointPolicy(allowPrivate: true)
        #expect(try await open.addresses(of: Endpoint("http://localhost:8080/x"), resolver: resolver, for: "p").count == 1)
        let listed = EndpointPolicy(allowPrivate: true, allowedHosts: ["crm.example"])
        await #expect(throws: RegistryError.self) {
            _ = try await listed.addresses(of: Endpoint("http://localhost/x"), resolver: resolver, for: "p")
        }
    }

    @Test func endpointsParse() throws {
        let e = try Endpoint("https://CRM.example:8443/hooks/deletions?v=2")
        #expect(e.scheme == "https" && e.host == "crm.example" && e.port == 8443 && e.target == "/hooks/deletions?v=2")
        for bad in ["ftp://x/", "http:///x", "https://user:pw@x/", "//x/y", "http://x:0/", "http://a b/"] {
            #expect(throws: RegistryError.self, "\(bad)") { try Endpoint(bad) }
        }
        // The path is kept as written, escapes and all: it is what the request line carries.
        #expect(try Endpoint("https://crm.example/a%20b/%0D%0A?x=%00").target == "/a%20b/%0D%0A?x=%00")
        #expect(try Endpoint("https://crm.example?x=1").target == "/?x=1")
        #expect(try Endpoint("http://[2606:4700::1111]:8080/x").hostHeader == "[2606:4700::1111]:8080")
        #expect(try Endpoint("https://crm.example/").hostHeader == "crm.example")
    }

    /// Every byte that is not RFC 3986's, anywhere in an endpoint, is refused: nothing a client registers can end the
    /// notice's request line or a header (the path used to be percent-decoded into it).
    @Test func noByteThatCouldEndALineReachesTheRequestLine() throws {
        for byte in UInt8(0)...UInt8(255) where !Endpoint.isURLByte(byte) && byte != UInt8(ascii: "%") {
            let raw = String(decoding: [byte], as: UTF8.self)
            for text in ["https://crm.example/a\(raw)b", "https://crm\(raw).example/", "https://crm.example/?q=\(raw)"] {
                #expect(throws: RegistryError.self, "byte \(byte)") { try Endpoint(text) }
            }
        }
        for bad in [
            "https://crm.example/%", "https://crm.example/%0", "https://crm.example/%zz", "https://crm%2e.example/",
            "https://crm.example/#frag", "https://[::1/", "https://[not-v6]/", "https://crm_x.example/",
        ] {
            #expect(throws: RegistryError.self, "\(bad)") { try Endpoint(bad) }
        }
        for endpoint in ["https://crm.example/a%0D%0AHost:%20evil/", "https://crm.example/?a=%0a"] {
            let target = try Endpoint(endpoint).target
            #expect(!target.utf8.contains { $0 < 0x21 || $0 == 0x7f }, "\(target)")
        }
    }
}
