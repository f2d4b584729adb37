"""Code the Crosscheck deployables share: wire DTOs, errors, settings, auth, logging."""
