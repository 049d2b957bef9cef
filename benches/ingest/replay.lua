-- wrk script of the ingest benchmark's outside load generator: replays
-- pre-signed Gitea deliveries, each once, from the pool files the benchmark
-- wrote (see outside.rs). A record is its length as ten ASCII digits, then
-- the whole HTTP request. wrk's thread N reads `<pool>.N.0`, `<pool>.N.1`, ...
--
-- Requests are read one at a time through a 1 MiB buffer: reading a whole
-- part at once held the thread up for milliseconds every thousand requests,
-- which showed as latency of the requests in flight; the pool is too large
-- for LuaJIT's heap anyway. No `response` callback either: it makes wrk hand
-- every answer to Lua. wrk counts answers outside 2xx/3xx itself; a 200 (a
-- delivery sent twice) can only come after the pool wrapped, which is
-- counted here and makes the benchmark refuse the row.

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local base
local part
local file

-- Opens part `k` of this thread's pool; false if there is none.
local function open(k)
  if file then
    file:close()
    file = nil
  end
  local f = io.open(base .. "." .. id .. "." .. k, "rb")
  if not f then
    return false
  end
  f:setvbuf("full", 1048576)
  file = f
  part = k
  return true
end

function init(args)
  base = args[1]
  wrapped = 0
  assert(open(0), "no pool file " .. base .. "." .. id .. ".0")
end

function request()
  local len = file:read(10)
  if not len then
    if not open(part + 1) then
      wrapped = wrapped + 1
      open(0)
    end
    len = file:read(10)
  end
  return file:read(tonumber(len))
end

function done(summary, latency, requests)
  local w = 0
  for _, t in ipairs(threads) do
    w = w + t:get("wrapped")
  end
  local e = summary.errors
  io.write(string.format(
    "WRK-RESULT requests=%d duration_us=%d accepted=%d other=%d wrapped=%d " ..
    "socket_errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, summary.requests - e.status, e.status, w,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
