"""The Critic: structured critiques on a different model provider."""
