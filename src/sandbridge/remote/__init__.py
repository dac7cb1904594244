"""Sandboxes on other machines (docs/remote.md): the far side's ``serve-stdio``, the
laptop's ``connect``, and the transports that carry the link between them."""
