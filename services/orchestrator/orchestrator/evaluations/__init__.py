"""Evaluation summaries ``crosscheck eval`` publishes: ``/v1/evaluations``."""
