"""Clients for the Orchestrator's peers (Actor, Critic, Sandbox), behind small Protocols."""
