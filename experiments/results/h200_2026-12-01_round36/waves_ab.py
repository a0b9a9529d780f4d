"""Round 36: ab_kernels.py with extra minibatch policies registered first (``waves3``, ``waves4``, ``waves6``: the
two-wave rule's threshold at 3, 4 and 6 SM waves), so one invocation can A/B a policy across shapes of different
widths. Usage: python3 waves_ab.py [ab_kernels.py arguments] (e.g. --prepare-b policy=waves4)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # experiments/, for ab_kernels and cuda_breakdown

from mok.heuristics import register_policy, round_to_tiles, two_wave_threshold  # noqa: E402


def _waves(n: float):
    def policy(shape, device, config):
        return round_to_tiles(two_wave_threshold(shape.hidden, shape.intermediate, device, min_waves=n),
                              config.expert_padding)
    return policy


for _n in (3, 4, 6):
    register_policy(f"waves{_n}")(_waves(_n))

import ab_kernels  # noqa: E402

ab_kernels.main(sys.argv[1:])
