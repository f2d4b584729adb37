"""Aggregates of the read model for dashboards: ``GET /v1/stats``."""
