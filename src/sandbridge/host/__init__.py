"""The host side of the relay: runtime dir, registration, app listeners, upstream."""
