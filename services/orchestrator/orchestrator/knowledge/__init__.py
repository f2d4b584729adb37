"""What the Critic judges with, as the orchestrator sees it: the Critic's profiles."""
