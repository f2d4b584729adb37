"""The crosscheck command line: start the platform, submit and follow runs."""
