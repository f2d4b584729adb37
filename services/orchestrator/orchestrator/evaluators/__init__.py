"""Evaluators: deterministic checks of an output (tests in the sandbox, a JSON schema)."""
