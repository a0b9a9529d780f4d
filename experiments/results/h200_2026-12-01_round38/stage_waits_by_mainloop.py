"""Round 38, a one-off reading: split the megakernel's mbarrier-wait stall samples by the wgmma shape that follows
them in address order (m64n256: consume_tile, the gate/up and cooperative down mainloops; m64n128: the ping-pong down
task's consume_column_half). A heuristic: code placed after a function's last wgmma has no shape (None).

    python3 experiments/results/h200_2026-12-01_round38/stage_waits_by_mainloop.py CSV.gz LISTING SECTION

LISTING is `nvdisasm -g` of the same build (ncu_source_lines.build_listing() of that commit's tree). The wait lines
(sync.cuh 217, 226, 227, 241: mbar_wait and mbar_wait_slow) are those of sync.cuh from 71e2d5a to 5df9356. On round 37's
anchor-2 gather kernel (call1's CSV, section 2; listing built from 71e2d5a): the full-stage wait (sync.cuh:241/217)
before m64n256 wgmma holds 26.1% of the samples, before m64n128 2.4%: the down ping-pong does not wait for stages.
"""
import collections
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import ncu_source_lines as nsl  # noqa: E402

csv, listing, section_index = sys.argv[1], sys.argv[2], int(sys.argv[3])
section = nsl.read_sections(gzip.open(csv, "rt").read())[section_index]
pairs = nsl.join(nsl.read_listing(Path(listing).read_text(), nsl.function_tag(section.name)), section.rows)
following = [None] * len(pairs)  # the shape of the next HGMMA at or after each instruction
shape = None
for i in range(len(pairs) - 1, -1, -1):
    text = pairs[i][0].text
    if nsl.opcode(text) == "HGMMA":
        shape = next(w for w in text.split() if w.startswith("HGMMA"))
    following[i] = shape
total = sum(nsl.number(r.get(nsl.SAMPLES, "0")) for _, r in pairs) or 1.0
waits = collections.Counter()
for (instruction, row), shape in zip(pairs, following):
    if instruction.where and instruction.where[0] == "sync.cuh" and instruction.where[1] in (217, 226, 227, 241):
        waits[(instruction.where[1], shape)] += nsl.number(row.get(nsl.SAMPLES, "0"))
print(section.name[:100])
for (line, shape), samples in waits.most_common(12):
    print(f"sync.cuh:{line} before {shape}: {100 * samples / total:.1f}% of the samples")
