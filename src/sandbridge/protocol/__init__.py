"""Sans-I/O protocol core: the wire formats of the Unix sockets and the HTTP/1.1 rules."""
