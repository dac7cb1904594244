"""The owner's dashboard: sessions, apps, terminal requests and egress in one page."""
