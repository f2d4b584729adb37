"""The Actor: drafts and revises through a model provider."""
