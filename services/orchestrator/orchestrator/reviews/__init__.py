"""Review items: paused runs and escalations waiting for a person."""
