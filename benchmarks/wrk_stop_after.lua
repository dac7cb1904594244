-- wrk script: each thread stops once it has read the number of responses given after
-- the URL (`wrk ... -s wrk_stop_after.lua URL N`); wrk still reports over its whole -d.
local limit, seen = 0, 0

function init(args)
  limit = tonumber(args[1])
end

function response(status, headers, body)
  seen = seen + 1
  if seen >= limit then
    wrk.thread:stop()
  end
end
