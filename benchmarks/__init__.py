"""sandbridge's relay benchmark: sandbridge side by side with the relays a user could pick."""
