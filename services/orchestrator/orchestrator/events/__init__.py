"""Run events: stored with a sequence number, pushed live over websockets."""
