"""App origins' host half: reaching apps, the session's settings and budget, small servers."""
