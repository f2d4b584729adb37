"""Several orchestrator replicas on one Postgres: heartbeats, a leader, failover."""
