-- POST a FIS create body (empty fid: the server mints one), as the JS SDK does after a failed local FID.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-goog-api-key"] = os.getenv("API_KEY")
wrk.body = '{"fid":"","authVersion":"FIS_v2","appId":"' .. os.getenv("APP_ID") .. '","sdkVersion":"w:0.6.24"}'
