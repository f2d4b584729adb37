"""How a peer call failed: the error tree lives in ``shared.peers``, since the sandbox's
shared client raises it too; the engine imports it from here."""

from shared.peers import PeerRejected, PeerUnavailable

__all__ = ["PeerRejected", "PeerUnavailable"]
