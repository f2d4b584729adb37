"""The sandbox's wire contract: its request and response DTOs (``schemas``) and the typed
client other services call it through (``client``)."""
