"""App origins' C front door: the thread that serves new connections first, and its binding."""
