"""Sans-I/O wire formats of the Unix sockets: registration, v1 JSON and stream mode."""
