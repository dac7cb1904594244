"""The clipboard bridge: the owner's clipboard, read after asking and written by mode."""
