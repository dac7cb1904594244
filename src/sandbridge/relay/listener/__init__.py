"""App origins' listeners: the path of a browser connection from its arrival to the app and back."""
