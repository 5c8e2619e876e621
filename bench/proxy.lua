-- wrk script for the Harvest proxy benchmark.
--
-- wrk connects to the proxy (the URL on its command line) and sends requests whose request
-- line carries an absolute URI, as a browser configured with a forward proxy does:
--   GET http://127.0.0.1:ORIGINPORT/obj/1k?r=RUN&n=3 HTTP/1.1
--   Host: 127.0.0.1:ORIGINPORT
--
-- Arguments (after `--` on wrk's command line), all required, in this order:
--   mode    "list": cycle through COUNT URLs BASE..PREFIX..0 .. BASE..PREFIX..(COUNT-1)
--           "random": each request one of the COUNT URLs of "list", picked uniformly at random
--           (a working set larger than a memory tier is then read from all over the disk)
--           "unique": every request a URL never sent before: BASE..PREFIX..THREAD.."-"..N
--   base    "http://127.0.0.1:ORIGINPORT", or "-" for origin-form targets (wrk straight at
--           an origin, as `run.py --calibrate` does)
--   host    the Host header's value (the origin's host:port)
--   prefix  the path and query up to the varying number, e.g. "/obj/1k?r=RUN&n="
--   count   how many URLs "list" and "random" use (ignored by "unique")
--   inm     an If-None-Match value to send, or "-" for none
--
-- done() prints one line "WRKJSON {...}" that run.py reads: requests, bytes, duration (us),
-- errors and latency percentiles (us).

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local mode, base, prefix, count
local headers = {}
local reqs = {}
local i = 0
local tid = 0

function init(args)
  mode = args[1]
  base = args[2] == "-" and "" or args[2]
  headers["Host"] = args[3]
  prefix = args[4]
  count = tonumber(args[5]) or 1
  if args[6] and args[6] ~= "-" then
    headers["If-None-Match"] = args[6]
  end
  tid = id or 0
  if mode == "list" or mode == "random" then
    for n = 0, count - 1 do
      reqs[n + 1] = wrk.format("GET", base .. prefix .. n, headers)
    end
    -- Threads start at different points of the list so they do not move in lock step.
    i = (tid * 7) % count
  end
  if mode == "random" then
    -- Each thread its own sequence: with one seed, threads would ask for the same URLs.
    math.randomseed(os.time() * 1000 + tid * 7919)
  end
end

function request()
  if mode == "random" then
    return reqs[math.random(count)]
  end
  if mode == "list" then
    i = i + 1
    if i > count then
      i = 1
    end
    return reqs[i]
  end
  i = i + 1
  return wrk.format("GET", base .. prefix .. tid .. "-" .. i, headers)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "bytes": %d, "duration_us": %d, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
      .. '"latency_us": {"mean": %.1f, "p50": %d, "p90": %d, "p99": %d, "max": %d}}\n',
    summary.requests, summary.bytes, summary.duration,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max))
end
