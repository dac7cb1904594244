"""Sans-I/O HTTP/1.1 policy: parsing, validation, re-serialisation, the base-path rule."""
