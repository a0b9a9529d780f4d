"""How ranks reach each other's memory (emulated in one process now; real GPUs behind the same interface)."""

from .peers import EmulatedPeers, PeerBuffer, PeerGroup

__all__ = ["EmulatedPeers", "PeerBuffer", "PeerGroup"]
