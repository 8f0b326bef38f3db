-- IID batchAdd with the 1000-token body in BODY_FILE.
local f = assert(io.open(os.getenv("BODY_FILE"), "r"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("SERVER_KEY")
wrk.headers["access_token_auth"] = "true"
