"""How ranks reach each other's memory: peer groups (emulated in one process, or real GPUs behind the same
interface) and, in :mod:`mok.comm.transport`, the transports that move a schedule table's rows between them.

(:mod:`mok.comm.transport` is imported by name, not from here: it builds on :mod:`mok.transfers`, which builds
on this package.)
"""

from .peers import EmulatedPeers, PeerBuffer, PeerGroup

__all__ = ["EmulatedPeers", "PeerBuffer", "PeerGroup"]
