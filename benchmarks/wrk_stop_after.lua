-- wrk script: stop once the thread has read the number of responses given after the URL
-- (`wrk -t1 ... -s wrk_stop_after.lua URL N`), with one thread: its SIGINT to wrk itself
-- wakes wrk's main thread from its --duration sleep, so a short load does not wait out
-- the whole second (wrk's shortest -d). wrk reports over the time it actually ran.
local ffi = require("ffi")
ffi.cdef [[
int getpid(void);
int kill(int pid, int sig);
]]
local SIGINT = 2
local limit, seen = 0, 0

function init(args)
  limit = tonumber(args[1])
end

function response(status, headers, body)
  seen = seen + 1
  if seen == limit then
    wrk.thread:stop()
    ffi.C.kill(ffi.C.getpid(), SIGINT)
  end
end
