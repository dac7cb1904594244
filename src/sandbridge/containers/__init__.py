"""The container engine bridge: the sandbox's ``DOCKER_HOST``, policy-gated (docs/containers.md)."""
