"""The Orchestrator: durable reflection loop, runs API, review queue and live events."""
