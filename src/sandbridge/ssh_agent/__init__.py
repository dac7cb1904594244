"""The ssh-agent bridge: the sandbox signs with the keys the owner chose, never holds them."""
