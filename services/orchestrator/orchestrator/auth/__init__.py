"""Bearer tokens with roles (service, reviewer, admin), stored hashed."""
