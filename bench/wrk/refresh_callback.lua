-- Token refresh callbacks from an app backend: PUT .../installations/{fid}/registration for 1000 installations,
-- each request with a new token (so every request supersedes the installation's previous token).
local n = 0
request = function()
  n = n + 1
  local fid = string.format("f%021d", math.random(1, 1000))
  local body = '{"token":"' .. fid .. ':r' .. n .. '-' .. math.random(1, 1000000000) .. '","platform":"android"}'
  return wrk.format("PUT", "/v1/projects/bench-proj/installations/" .. fid .. "/registration",
    { ["Authorization"] = "Bearer " .. os.getenv("SERVER_KEY"), ["Content-Type"] = "application/json" }, body)
end
