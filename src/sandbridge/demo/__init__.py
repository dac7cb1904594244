"""The bundled demo app served from inside the sandbox by ``sandbridge demo``."""
