"""Runs: create, read, list, cancel, and export the trajectory."""
