-- Send feedback: POST .../feedback with 1000 results a request, each "NotRegistered" (dead) for a random one of
-- REGISTRATIONS seeded tokens: the heaviest path (a lookup, and for a token still current a retirement and its feed
-- event). The breaker is set out of reach by the script, so every batch is applied as results, not quarantine.
local pool = tonumber(os.getenv("REGISTRATIONS") or "100000")
request = function()
  local parts = {}
  for i = 1, 1000 do
    parts[i] = string.format('{"token":"f%021d:seed","legacy":"NotRegistered"}', math.random(1, pool))
  end
  return wrk.format("POST", "/v1/projects/bench-proj/feedback",
    { ["Authorization"] = "Bearer " .. os.getenv("SERVER_KEY"), ["Content-Type"] = "application/json" },
    '{"results":[' .. table.concat(parts, ",") .. ']}')
end
