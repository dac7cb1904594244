"""App origins' C front door: the thread that serves new browser connections first, and its binding."""
