"""Runs untrusted generated code against tests, isolated."""
