-- wrk script: POST a small chat completion.  BENCH_MODEL picks the model
-- (env), BENCH_STREAM=1 asks for a stream with include_usage,
-- BENCH_DELAY_MS paces each connection (fixed moderate rate).
local model = os.getenv("BENCH_MODEL") or "gpt-4.1"
local stream = os.getenv("BENCH_STREAM") == "1"
local delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local extra = ""
if stream then
  extra = ',"stream":true,"stream_options":{"include_usage":true}'
end
wrk.body = '{"model":"' .. model .. '","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16' .. extra .. '}'
if delay_ms > 0 then
  function delay() return delay_ms end
end
