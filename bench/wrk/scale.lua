-- bench/scale.sh's routes over a seeded database of N installations (env N): n's FID is
-- "c" .. 10 digits of (n * 48271) mod (2^31 - 1) .. 11 digits of n, so FIDs are random in index order, and every
-- n not a multiple of 100 is live (those are deleted). WORKLOAD picks the route; SERVER_KEY authenticates.
local n_max = tonumber(os.getenv("N"))
local workload = os.getenv("WORKLOAD")
local key = "Bearer " .. os.getenv("SERVER_KEY")
local project = "/v1/projects/" .. (os.getenv("PROJECT") or "scale-proj")
local counter = 0

local function fid_of(n) return string.format("c%010d%011d", (n * 48271) % 2147483647, n) end
local function live()
  local n = math.random(1, n_max)
  if n % 100 == 0 then n = n - 1 end
  return n
end
local function token_of(fid) return string.sub(fid .. ":APA91b" .. string.rep(fid, 6), 1, 152) end

request = function()
  counter = counter + 1
  local h = { ["Authorization"] = key, ["Content-Type"] = "application/json" }
  if workload == "refresh" then
    local fid = fid_of(live())
    local body = '{"token":"' .. fid .. ':r' .. counter .. '-' .. math.random(1, 1000000000) .. '","platform":"android"}'
    return wrk.format("PUT", project .. "/installations/" .. fid .. "/registration", h, body)
  elseif workload == "consent" then
    local body = '{"autoInitEnabled":' .. (math.random(1, 2) == 1 and "true" or "false") .. '}'
    return wrk.format("PUT", project .. "/installations/" .. fid_of(live()) .. "/consent", h, body)
  elseif workload == "subscribe" then
    return wrk.format("POST", project .. "/registrations/" .. fid_of(live()) .. "/topicSubscriptions?topicName=s"
      .. math.random(1, 100), h, "{}")
  elseif workload == "iidinfo" then
    return wrk.format("GET", "/iid/info/" .. token_of(fid_of(live())) .. "?details=true", h)
  elseif workload == "sendability" then
    return wrk.format("GET", project .. "/registrations/" .. token_of(fid_of(live())) .. ":sendability", h)
  elseif workload == "topic" then
    return wrk.format("GET", project .. "/topics/region-" .. math.random(0, 99) .. "/registrations?pageSize=100", h)
  elseif workload == "condition" then
    local body = string.format('{"condition":"\'region-%d\' in topics && \'lang-%d\' in topics","pageSize":100}',
      math.random(0, 99), math.random(0, 19))
    return wrk.format("POST", project .. "/targets:resolve", h, body)
  elseif workload == "feed" then
    return wrk.format("GET", project .. "/events?after=" .. os.getenv("FEED_AFTER") .. "&pageSize=100", h)
  elseif workload == "receipt" then
    return wrk.format("GET", project .. "/deletions/" .. fid_of(100 * math.random(1, math.floor(n_max / 100))), h)
  end
  error("unknown WORKLOAD " .. tostring(workload))
end
