-- Requests made by the app SDKs of many installations, each with its own FIS auth token. INSTALLATIONS names a
-- file of "fid authToken" lines; WORKLOAD picks the request:
--   consent   PUT .../installations/{fid}/consent, autoInitEnabled flipping at random (the consent ledger grows)
--   register  POST .../registrations with an Android body (the FCM SDK's registration after getToken)
--   subscribe POST .../registrations/{fid}/topicSubscriptions/{topic}:subscribe, one of 20 topics at random (the
--             FCM SDK's topic verb; a repeat finds the subscription there)
--   delete    DELETE /v1/project/{p}/instanceId/{fid} with the server key, each installation once (then 404s)
local lines = {}
for line in io.lines(os.getenv("INSTALLATIONS")) do
  local fid, token = line:match("^(%S+) (%S+)$")
  lines[#lines + 1] = { fid = fid, token = token }
end
local workload = os.getenv("WORKLOAD")
local project = os.getenv("PROJECT") or "bench-proj"
local threads, count = {}, 0
function setup(thread)
  count = count + 1
  thread:set("tid", count)
  table.insert(threads, thread)
end
function init(args)
  -- Each of wrk's two threads (-t2, as bench/lib.sh runs it) deletes its own half: thread t takes t, t + 2, t + 4 …
  next_index = tid
end
request = function()
  if workload == "consent" then
    local i = lines[math.random(#lines)]
    local on = math.random(2) == 1 and "true" or "false"
    return wrk.format("PUT", "/v1/projects/" .. project .. "/installations/" .. i.fid .. "/consent",
      { ["x-goog-firebase-installations-auth"] = "FIS " .. i.token, ["Content-Type"] = "application/json" },
      '{"autoInitEnabled":' .. on .. '}')
  elseif workload == "register" then
    local i = lines[math.random(#lines)]
    return wrk.format("POST", "/v1/projects/" .. project .. "/registrations",
      { ["x-goog-firebase-installations-auth"] = "FIS " .. i.token, ["Content-Type"] = "application/json" },
      '{"android":{"package_name":"com.example.bench","app_version":"1.0"}}')
  elseif workload == "subscribe" then
    local i = lines[math.random(#lines)]
    return wrk.format("POST", "/v1/projects/" .. project .. "/registrations/" .. i.fid .. "/topicSubscriptions/t" ..
      math.random(20) .. ":subscribe", { ["x-goog-firebase-installations-auth"] = "FIS " .. i.token })
  else
    local i = lines[((next_index - 1) % #lines) + 1]
    next_index = next_index + 2
    return wrk.format("DELETE", "/v1/project/" .. project .. "/instanceId/" .. i.fid,
      { ["Authorization"] = "Bearer " .. os.getenv("SERVER_KEY") })
  end
end
