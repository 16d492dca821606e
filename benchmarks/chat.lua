-- wrk script for benchmarks/run.py: POST one small chat request per call, print a JSON summary.
-- env: BENCH_MODEL (model name in the body), BENCH_STREAM ("1" adds "stream": true),
-- BENCH_MAX_TOKENS (default 32), BENCH_THINK_MS (each connection waits a random time,
-- exponential with this mean, before each request: arrivals that no longer march in step).
-- No response() hook: it would make wrk run Lua per response and skew the load generator.
local model = os.getenv("BENCH_MODEL") or "bench-model"
local stream = os.getenv("BENCH_STREAM") == "1"
local max_tokens = os.getenv("BENCH_MAX_TOKENS") or "32"
local think = tonumber(os.getenv("BENCH_THINK_MS") or "0")

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
wrk.body = '{"model":"' .. model .. '","messages":['
  .. '{"role":"system","content":"You are a benchmark."},'
  .. '{"role":"user","content":"Say hello in five words."}],'
  .. '"max_tokens":' .. max_tokens .. ',"temperature":0'
  .. (stream and ',"stream":true' or '') .. '}'

if think > 0 then
  math.randomseed(os.time())
  delay = function()
    return math.floor(-math.log(1 - math.random()) * think)
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,'
      .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
      .. '"mean_us":%.1f,"max_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
