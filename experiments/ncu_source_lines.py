"""EXPERIMENT (round 37): Nsight Compute's source counters of the megakernel, summed by CUDA source line.

ncu's source page (``ncu -i R.ncu-rep --page source --csv --print-source sass``) lists every SASS instruction of a
profiled kernel with its executed instructions and warp-stall samples, but not the CUDA line it came from (its
``--print-source cuda`` view carried no counters in round 37's call 1). The same kernel built here (nvcc 13.0, the
JIT's flags plus ``-lineinfo``) gives the addresses' lines through ``nvdisasm -g``, so this script joins the two
instruction by instruction, after checking that the opcodes agree, and prints:

* the source lines with the most executed instructions and the most stall samples (shares of the kernel's total);
* for lines inside shared helpers (``sync.cuh``'s waits, the intrinsics headers), the same split by the line that
  inlined them, e.g. ``mbar_wait`` called from the consumers' mainloop against the producer's;
* per line, its top stall reasons (``--reasons``).

On the H200 (``-lineinfo`` changes no SASS, only the line table)::

    MOK_CUDA_LINEINFO=1 ncu --clock-control none --nvtx --nvtx-include "profile/" -k regex:sm90_moe_forward \\
        --launch-count 2 --section SourceCounters --section WarpStateStats --import-source yes -o R \\
        python3 experiments/ncu_gemm_gap.py anchor-2 --launch
    ncu -i R.ncu-rep --page source --csv --print-source sass | gzip > src.csv.gz

then here (builds the object with ``-lineinfo``, about 30 s)::

    python3 experiments/ncu_source_lines.py src.csv.gz --section 2 [--listing K.sass] [--top 30] [--reasons] \
        [--compare 0 --labels gather,ring --plot shares.png]

``--section``: which kernel of the CSV (ncu may print each profiled kernel more than once; round 37: sections 0-1 ring,
2-3 gather at anchor-2). The function to read from the listing follows from the kernel's template arguments.
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Files whose lines are shared helpers: their instructions are also attributed to the line that inlined them.
HELPER_FILES = ("sync.cuh", "tma.cuh", "cuda_bf16.hpp", "sm_20_intrinsics.hpp", "sm_30_intrinsics.hpp",
                "device_atomic_functions.hpp")
INSTRUCTIONS = "Instructions Executed"
SAMPLES = "Warp Stall Sampling (All Samples)"


@dataclass
class Section:
    """One kernel of ncu's source CSV: its (demangled) name and one dict per SASS instruction, in address order."""
    name: str
    rows: list[dict] = field(default_factory=list)


@dataclass
class ListingLine:
    """One instruction of an ``nvdisasm -g`` listing: its offset, (file name, line) and text."""
    offset: int
    where: tuple[str, int] | None
    text: str


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_sections(text: str) -> list[Section]:
    """The kernels of ``ncu --page source --csv --print-source sass`` output: a ``"Kernel Name",NAME`` row, a header
    row starting with ``Address``, then one row per instruction."""
    sections: list[Section] = []
    header: list[str] | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            sections.append(Section(row[1]))
            header = None
        elif row[0] == "Address":
            header = row
        elif sections and header is not None:
            sections[-1].rows.append(dict(zip(header, row)))
    return sections


def function_tag(kernel_name: str) -> str:
    """The mangled-name fragment of the megakernel instantiation named ``kernel_name`` (``... Sm90Tiles, (bool)1,
    (bool)0>`` -> ``Lb1ELb0E``), which picks its function out of the listing."""
    flags = re.findall(r"\(bool\)(\d)", kernel_name)
    if len(flags) != 2:
        raise ValueError(f"not a megakernel instantiation: {kernel_name!r}")
    return f"Lb{flags[0]}ELb{flags[1]}E"


def read_listing(text: str, tag: str) -> list[ListingLine]:
    """The instructions of the function whose section name contains ``tag`` in an ``nvdisasm -g`` listing."""
    out: list[ListingLine] = []
    inside = False
    where: tuple[str, int] | None = None
    for line in text.splitlines():
        if line.startswith(".text."):
            inside = tag in line
            where = None
            continue
        if not inside:
            continue
        located = re.match(r'\s*//## File "(.*)", line (\d+)', line)
        if located:
            where = (located.group(1).rsplit("/", 1)[-1], int(located.group(2)))
            continue
        instruction = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if instruction:
            out.append(ListingLine(int(instruction.group(1), 16), where, instruction.group(2)))
    return out


def opcode(text: str) -> str:
    """The opcode's base name of one SASS instruction (``@!P0 IMAD.MOV.U32 R1, ...`` -> ``IMAD``)."""
    words = [w for w in text.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else ""


def join(listing: list[ListingLine], rows: list[dict], max_mismatch: float = 0.01) -> list[tuple[ListingLine, dict]]:
    """The listing's instructions paired with ncu's rows, in order. Raises ValueError when the counts differ or more
    than ``max_mismatch`` of the opcodes disagree (a different compiler or different flags built the two)."""
    if len(listing) != len(rows):
        raise ValueError(f"the listing has {len(listing)} instructions, ncu's kernel {len(rows)}: not the same build")
    mismatches = sum(opcode(a.text) != opcode(r.get("Source", "")) for a, r in zip(listing, rows))
    if mismatches > max_mismatch * len(rows):
        raise ValueError(f"{mismatches} of {len(rows)} opcodes differ: not the same build")
    return list(zip(listing, rows))


def by_line(pairs: list[tuple[ListingLine, dict]], with_caller: bool = False) -> dict[tuple, list[float]]:
    """[instructions, samples] per source line. With ``with_caller`` a helper-file line is split by the line that
    inlined it: the nearest earlier instruction whose line is not in a helper file (one pass, in address order)."""
    sums: dict[tuple, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    caller: tuple[str, int] | None = None
    for instruction, row in pairs:
        where = instruction.where
        in_helper = where is not None and where[0] in HELPER_FILES
        key: tuple = (where, caller) if with_caller and in_helper else (where,)
        if where is not None and not in_helper:
            caller = where
        sums[key][0] += number(row.get(INSTRUCTIONS, "0"))
        sums[key][1] += number(row.get(SAMPLES, "0"))
    return dict(sums)


def stall_reasons(pairs: list[tuple[ListingLine, dict]], top: int = 3) -> dict[tuple[str, int], str]:
    """Each source line's ``top`` stall reasons, as shares of its samples (``"-"`` for a line without samples)."""
    counts: dict[tuple[str, int], collections.Counter] = collections.defaultdict(collections.Counter)
    for instruction, row in pairs:
        for name, value in row.items():
            if name.startswith("stall_") and "Not Issued" not in name:
                counts[instruction.where][name[len("stall_"):]] += number(value)
    out = {}
    for where, reasons in counts.items():
        total = sum(reasons.values())
        out[where] = (", ".join(f"{name} {100 * v / total:.0f}%" for name, v in reasons.most_common(top))
                      if total else "-")
    return out


def describe(key: tuple) -> str:
    def place(where):
        return "?" if where is None else f"{where[0]}:{where[1]}"
    return place(key[0]) if len(key) == 1 else f"{place(key[0])} <- {place(key[1])}"


def table(sums: dict[tuple, list[float]], order: int, top: int, reasons: dict | None = None) -> str:
    """Markdown rows of the ``top`` keys by instructions (order 0) or samples (order 1), as shares of the totals;
    with ``reasons`` (:func:`stall_reasons`), each plain line's top stall reasons in a last column."""
    total_i = sum(v[0] for v in sums.values()) or 1.0
    total_s = sum(v[1] for v in sums.values()) or 1.0
    lines = ["| line | instructions | share | samples share |" + (" top stalls |" if reasons else ""),
             "|---|---|---|---|" + ("---|" if reasons else "")]
    for key, (i, s) in sorted(sums.items(), key=lambda kv: -kv[1][order])[:top]:
        extra = f" {reasons.get(key[0], '-') if len(key) == 1 else ''} |" if reasons else ""
        lines.append(f"| {describe(key)} | {i / 1e6:.2f} M | {100 * i / total_i:.1f}% | {100 * s / total_s:.1f}% |"
                     + extra)
    return "\n".join(lines)


def plot_shares(series: dict[str, dict[tuple, list[float]]], path: Path, top: int = 12, title: str = "") -> None:
    """A horizontal bar chart of stall-sample shares: the ``top`` keys by the first series' samples, one bar per series
    (e.g. the gather and the ring kernel, whose SASS shares the source lines)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = list(series)
    first = series[names[0]]
    keys = sorted(first, key=lambda k: -first[k][1])[:top]
    height = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(keys) + 1.2))
    for i, name in enumerate(names):
        total = sum(v[1] for v in series[name].values()) or 1.0
        shares = [100 * series[name].get(k, [0.0, 0.0])[1] / total for k in keys]
        ax.barh([y + i * height for y in range(len(keys))], shares, height, label=name)
    ax.set_yticks([y + (len(names) - 1) * height / 2 for y in range(len(keys))], [describe(k) for k in keys],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of the kernel's warp stall samples (%)")
    ax.legend()
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_listing() -> str:
    """``nvdisasm -g`` of this tree's megakernel object built with ``-lineinfo`` (nvcc, cuobjdump and nvdisasm from
    the triton wheel, as mok.cuda.build finds them)."""
    sys.path.insert(0, str(REPO))
    from mok.cuda import build  # noqa: PLC0415

    tool = build.find_cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found (triton wheel or PATH)")
    nvdisasm = Path(tool).with_name("nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "kernel.o"
        proc = build.compile_object(obj, lineinfo=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{proc.stderr}")
        subprocess.run([tool, "-xelf", "all", str(obj)], cwd=tmp, check=True, capture_output=True)
        cubin = next(Path(tmp).glob("*.cubin"))
        return subprocess.run([str(nvdisasm), "-g", "-c", str(cubin)], check=True, capture_output=True,
                              text=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="ncu's --page source --csv --print-source sass output (.gz allowed)")
    parser.add_argument("--section", type=int, default=0, help="which kernel of the CSV (0-based)")
    parser.add_argument("--listing", type=Path, help="an nvdisasm -g listing of the same build (default: build one)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--reasons", action="store_true", help="add each line's top stall reasons")
    parser.add_argument("--plot", type=Path, help="draw the stall-sample shares of the top lines (inlined helpers by "
                        "caller) into this PNG; with --compare, both kernels side by side")
    parser.add_argument("--compare", type=int, help="another kernel of the CSV to draw beside --section's")
    parser.add_argument("--labels", default="", help="comma-separated legend labels for --section and --compare")
    parser.add_argument("--title", default="", help="the plot's title")
    args = parser.parse_args(argv)
    opener = gzip.open if args.csv.suffix == ".gz" else open
    with opener(args.csv, "rt") as f:
        sections = read_sections(f.read())
    section = sections[args.section]
    listing_text = args.listing.read_text() if args.listing else build_listing()
    pairs = join(read_listing(listing_text, function_tag(section.name)), section.rows)
    print(f"# {section.name}\n")
    print(f"{len(pairs)} instructions; {sum(number(r.get(INSTRUCTIONS, '0')) for _, r in pairs) / 1e9:.3f} G executed, "
          f"{sum(number(r.get(SAMPLES, '0')) for _, r in pairs):.0f} stall samples\n")
    lines = by_line(pairs)
    reasons = stall_reasons(pairs) if args.reasons else None
    print("## By executed instructions\n\n" + table(lines, 0, args.top, reasons) + "\n")
    print("## By stall samples\n\n" + table(lines, 1, args.top, reasons) + "\n")
    print("## Helper lines by the line that inlined them (samples)\n\n" + table(by_line(pairs, True), 1, args.top) + "\n")
    if args.plot:
        chosen = [args.section] + ([args.compare] if args.compare is not None else [])
        labels = [x for x in args.labels.split(",") if x] or [f"section {i}" for i in chosen]
        series = {}
        for label, index in zip(labels, chosen):
            other = sections[index]
            series[label] = by_line(join(read_listing(listing_text, function_tag(other.name)), other.rows), True)
        plot_shares(series, args.plot, top=min(args.top, 16), title=args.title)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
