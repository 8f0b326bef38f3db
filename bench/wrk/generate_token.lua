-- POST generate with the installation's refresh token (the JS SDK's body).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "FIS_v2 " .. os.getenv("REFRESH")
wrk.body = '{"installation":{"sdkVersion":"w:0.6.24"}}'
