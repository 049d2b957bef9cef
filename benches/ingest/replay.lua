-- wrk script of the ingest benchmark's outside load generator: replays
-- pre-signed Gitea deliveries, each once, from the pool files the benchmark
-- wrote (see outside.rs). A record is its length as ten ASCII digits, then
-- the whole HTTP request. wrk's thread N reads `<pool>.N.0`, `<pool>.N.1`, ...
-- one at a time: small parts keep LuaJIT's heap small, and reading one
-- (a few MB from memory) holds the thread up for a millisecond or two.
--
-- Every answer is counted by status: 202 is an accepted delivery; a 200
-- means the pool ran out and a delivery was sent twice (the benchmark then
-- says the rate covers less than the whole phase).

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local base
local part
local data
local pos

-- Loads part `k` of this thread's pool; false if there is none.
local function load(k)
  data = nil
  local f = io.open(base .. "." .. id .. "." .. k, "rb")
  if not f then
    return false
  end
  data = f:read("*a")
  f:close()
  part = k
  pos = 1
  return true
end

function init(args)
  base = args[1]
  accepted = 0
  repeated = 0
  other = 0
  wrapped = 0
  assert(load(0), "no pool file " .. base .. "." .. id .. ".0")
end

function request()
  if pos > #data then
    if not load(part + 1) then
      wrapped = wrapped + 1
      load(0)
    end
  end
  local len = tonumber(string.sub(data, pos, pos + 9))
  local req = string.sub(data, pos + 10, pos + 9 + len)
  pos = pos + 10 + len
  return req
end

function response(status, headers, body)
  if status == 202 then
    accepted = accepted + 1
  elseif status == 200 then
    repeated = repeated + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local a, r, o, w = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    a = a + t:get("accepted")
    r = r + t:get("repeated")
    o = o + t:get("other")
    w = w + t:get("wrapped")
  end
  local e = summary.errors
  io.write(string.format(
    "WRK-RESULT requests=%d duration_us=%d accepted=%d repeated=%d other=%d wrapped=%d " ..
    "socket_errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, a, r, o, w,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
