"""CPU checks of the SM90 megakernel (no GPU needed; the compile checks are skipped without nvcc).

* it compiles for sm_90a with plain nvcc, without spills, with setmaxnreg honoured;
* its SASS uses wgmma (HGMMA) and no local memory (LDL/STL);
* its static task order (scheduler.cuh, compiled for the host) cannot deadlock and never overwrites ring rows
  a reader still needs, replayed on real schedule tables from mok.build_schedule, with and without the fused
  top-1 combine (no combine tasks), for all ranks in one launch (with and without early combine: then every
  combine block also comes after every rank's down tasks of the steps holding its tokens' rows; with the sum kernel:
  no combine task, every push counted by the launch's end) and for one real rank per launch (every rank's expert
  launch, then every rank's combine launch);
* its launch function refuses inconsistent (R, E, local_rank, phases) combinations;
* its wgmma shared-memory descriptor has the bit layout CuTe builds for the same K-major SW128 tile;
* the counter block size computed in Python equals CounterLayout::make's;
* the device schedule-table logic (schedule_tables.cuh, replayed on the host) equals mok.build_schedule's, bit
  for bit, and an explicit capacity is checked;
* the workspace cache reuses fixed buffers for equal sizes only, and builds the right pointer tables;
* the torch binding (csrc/binding.cpp) type-checks with g++ against the installed torch's headers.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
import torch

import mok
from mok.cuda import build
from mok.cuda.schedule_tables import KernelSchedule, combine_order

NVCC = build.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)")

FORWARD_KERNEL = "sm90_moe_forward_kernel"


def compile_host_program(source: str, directory, name: str, *extra_flags: str):
    """``source`` (C++ including mok/cuda/include headers) built into a host executable in ``directory``."""
    src = directory / f"{name}.cu"
    src.write_text(source)
    exe = directory / name
    proc = subprocess.run([NVCC, "-std=c++17", *extra_flags, f"-I{build.INCLUDE_DIR}", str(src), "-o", str(exe)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return exe


@pytest.fixture(scope="module")
def kernel_object(tmp_path_factory):
    """(object path, ptxas report) of csrc/sm90_moe_forward.cu compiled for sm_90a."""
    out = tmp_path_factory.mktemp("sm90") / "sm90_moe_forward.o"
    proc = build.compile_object(out, verbose=True)
    assert proc.returncode == 0, f"nvcc failed:\n{proc.stderr}"
    return out, proc.stderr


def _sections(text: str, header: str) -> dict[str, str]:
    """The lines after each line matching ``header`` (its group 1 names the section), up to the next such line."""
    sections, current = {}, None
    for line in text.splitlines():
        match = re.search(header, line)
        if match:
            current = match.group(1)
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def _forward_kernel_reports(ptxas: str) -> dict[str, str]:
    """ptxas -v text of each forward-kernel instantiation (from its 'Compiling entry function' line on)."""
    return {name: text for name, text in _sections(ptxas, r"Compiling entry function '(\w+)'").items()
            if FORWARD_KERNEL in name}


@needs_nvcc
def test_compiles_for_sm90a_without_spills(kernel_object):
    _, ptxas = kernel_object
    reports = _forward_kernel_reports(ptxas)
    assert len(reports) == 4, f"expected the simple, pipelined, ping-pong and cluster kernels, got {sorted(reports)}"
    for name, text in reports.items():
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in text, f"{name}:\n{text}"
        assert re.search(r"Used 168 registers", text), f"{name}: unexpected register count:\n{text}"
    # setmaxnreg is only honoured when nothing forces a minimum register count (C7507), and wgmma must
    # not be serialised by accumulator accesses between issue and wait.
    assert "C7507" not in ptxas, ptxas
    assert "serialized" not in ptxas, ptxas


@needs_nvcc
def test_sass_uses_wgmma_and_no_local_memory(kernel_object):
    if build.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (triton wheel or PATH)")
    obj, _ = kernel_object
    functions = {name: body for name, body in _sections(build.disassemble(obj), r"Function : (\S+)").items()
                 if FORWARD_KERNEL in name}
    assert len(functions) == 4, sorted(functions)
    for name, body in functions.items():
        ping_pong = "Lb1ELb1E" in name  # <Tiles, kPipelined = true, kDownPingPong = true, kClusters = false>
        clusters = "Lb1ELb0ELb1E" in name  # <Tiles, true, false, kClusters = true>
        # The cluster kernel's gate/up halves of B come by multicast (cluster_pairs.cuh); no other kernel multicasts.
        assert ("UTMALDG.2D.MULTICAST" in body) == clusters, name
        # 4 k16 steps of m64n256k16 (bf16 -> fp32) for the gate/up tile, and 4 more for the down block, except in
        # the ping-pong instantiation, whose down block is 4 k16 steps x two m64n128k16 (one per 64 rows).
        assert body.count("HGMMA.64x256x16.F32.BF16") == (4 if ping_pong else 8), name
        assert body.count("HGMMA.64x128x16.F32.BF16") == (8 if ping_pong else 0), name
        assert not re.search(r"\b(LDL|STL)(\.\w+)*\s", body), f"{name} uses local memory"
        assert "USETMAXREG" in body, f"{name}: register reallocation missing"
        # The instantiation's register split (RegisterSplit): producer / consumers 64 / 216 with ping-pong, else
        # 56 / 224.
        producer, consumer = (64, 216) if ping_pong else (56, 224)
        given = {int(n, 16) for n in re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", body)}
        taken = {int(n, 16) for n in re.findall(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, (0x[0-9a-f]+)", body)}
        assert given == {producer} and taken == {consumer}, f"{name}: setmaxnreg {given} / {taken}"


def _header_constant(name: str, header: str = "weighted_sum.cuh") -> int:
    """An ``constexpr int`` of a kernel header, read from its source."""
    text = (build.INCLUDE_DIR / "mok" / header).read_text()
    return int(re.search(rf"constexpr int {name} = (\d+);", text).group(1))


def _row_loads_before_first_use(body: str) -> int:
    """The most 16-byte read-only loads (LDG ... .128.CONSTANT) that the SASS ``body`` issues in a row before an FMUL
    (the sums' first use of a loaded value): how many row loads a thread keeps in flight."""
    best = run = 0
    for line in body.splitlines():
        if re.search(r"LDG\.E(\.\w+)*\.128\.CONSTANT", line):
            run += 1
            best = max(best, run)
        elif "FMUL" in line:
            run = 0
    return best


def test_sum_kernel_limit_mirrors_the_header():
    """backend.SUM_KERNEL_MAX_TOP_K (what auto and sum_kernel_allowed check) is the kernel's table size."""
    from mok.cuda.backend import SUM_KERNEL_MAX_TOP_K
    assert SUM_KERNEL_MAX_TOP_K == _header_constant("kSumMaxTopK")


@needs_nvcc
def test_sum_kernel_keeps_its_loads_in_flight(kernel_object):
    """The weighted sum's own kernel (weighted_sum.cuh): no spills, registers for kSumMinBlocks CTAs per SM, and every
    load of a batch (kSumItems x kSumKUnroll) issued before the first is summed. Without the minimum CTA count in
    __launch_bounds__, ptxas gave it 48 registers and issued each load after the previous one's sum (round 34)."""
    obj, ptxas = kernel_object
    reports = {name: text for name, text in _sections(ptxas, r"Compiling entry function '(\w+)'").items()
               if "sm90_moe_sum_kernel" in name}
    assert len(reports) == 1, sorted(reports)
    text = next(iter(reports.values()))
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in text, text
    registers = int(re.search(r"Used (\d+) registers", text).group(1))
    threads, ctas = _header_constant("kSumThreads"), _header_constant("kSumMinBlocks")
    assert registers * threads * ctas <= 65536, f"{registers} registers: fewer than {ctas} CTAs of {threads} per SM"
    if build.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (triton wheel or PATH)")
    bodies = [body for name, body in _sections(build.disassemble(obj), r"Function : (\S+)").items()
              if "sm90_moe_sum_kernel" in name]
    assert len(bodies) == 1
    batch = _header_constant("kSumItems") * _header_constant("kSumKUnroll")
    assert _row_loads_before_first_use(bodies[0]) >= batch, "the sum kernel's row loads are not batched"


# ------------------------------------------------------------------------------------------------------
# The task order, replayed on the host
# ------------------------------------------------------------------------------------------------------

SIM_SOURCE = r"""
// Replays the megakernel's task order (mok/scheduler.cuh) in ticket order: every dependency must already be
// satisfied by smaller tickets (so no set of resident CTAs can deadlock), every task must appear exactly
// once, and no ring rows may be overwritten while a reader still needs them.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "mok/scheduler.cuh"

using namespace mok::sm90;

static int fail(const char* what, const Task& t) {
  printf("FAIL %s: ticket=%d kind=%d rank=%d minibatch=%d tile=%d nblock=%d\n", what, t.ticket, t.kind, t.rank,
         t.minibatch, t.tile, t.nblock);
  return 1;
}

struct Problem {
  int R, tiles_per_rank, tpm, slots, n_gu, n_down, combine_blocks, slots_per_rank, gather;
  std::vector<std::vector<std::vector<int>>> push;  // push[r][m][s]: rows of tile m of rank r going to source s
  // Early combine: the offsets table under test ([R * (max_mb + 1)]) and, per rank and block, the last step that
  // holds a row of one of the block's tokens (worked out independently by the test).
  std::vector<int> combine_offsets;
  std::vector<std::vector<int>> block_ready;
};

// Runs one launch's tickets in order, checking every task against the counters of the tickets before it, and
// adds its pushes to `pushed` [R]. Returns the number of tasks, or -1 on a failure (printed).
// With clusters (v.pair_units) the tickets come in units (2i, 2i + 1): padding tickets (kTaskIdle) are skipped, the two
// tasks of a unit must come from one group (the same kind), and `pairs` counts the units that are two row tiles of one
// gate/up column block (what a cluster runs with one weight load, if the tiles' expert is the same).
static long long pairs = 0, gate_up_tasks = 0;
// Spread dispatch (v.spread_dispatch): the next minibatch's dispatches must lie evenly among a step's gate/up tasks, at
// most `max_gap` tickets apart (and from the group's start to the first), so a decode that put them all at the
// group's end fails.

static long long run_launch(const Problem& P, const ScheduleView& v, int pushed_expected, std::vector<long long>& pushed) {
  const CounterLayout ctr = CounterLayout::make(P.R, P.tiles_per_rank, v.max_minibatches);
  std::vector<long long> counters(ctr.total, 0);
  std::set<std::tuple<int, int, int, int>> seen;
  std::vector<std::vector<int>> x_owner(P.R, std::vector<int>(P.slots, -1)), h_owner(P.R, std::vector<int>(P.slots, -1));
  std::map<std::pair<int, int>, int> gu_done, down_done;
  std::map<int, int> step_down_done;  // early combine: down tasks finished per step, all ranks
  std::map<std::pair<int, int>, int> dispatch_tasks;  // per (rank, tile): its dispatch tasks (D(0): its parts)
  TaskCursor cursor;
  cursor.start(v);
  long long tickets = 0;
  Task unit_first{};
  int last_dispatch = -1, last_group_base = -1;  // spread dispatch: the group's last dispatch ticket so far
  for (int ticket = 0;; ++ticket) {
    const Task t = cursor.decode(v, ticket);
    if (v.pair_units && ticket % 2 == 0) unit_first = t;
    if (v.pair_units && ticket % 2 == 1 && unit_first.kind != kTaskIdle && t.kind != kTaskIdle && t.kind != kTaskStop) {
      if (unit_first.kind != t.kind) return fail("a unit of two tickets straddles two groups", t), -1;
      if (t.kind == kTaskGateUp && t.rank == unit_first.rank && t.nblock == unit_first.nblock &&
          t.tile == unit_first.tile + 1)
        ++pairs;
    }
    if (t.kind == kTaskStop) break;
    if (t.kind == kTaskIdle) {
      if (!v.pair_units || ticket % 2 == 0) return fail("a padding ticket outside a unit's second place", t), -1;
      continue;
    }
    if (t.kind == kTaskGateUp) ++gate_up_tasks;
    if (v.spread_dispatch && t.kind == kTaskDispatch && t.minibatch > 0) {
      if (cursor.phase != kPhaseGateUp) return fail("a next-minibatch dispatch outside its gate/up group", t), -1;
      const int unit = v.pair_units ? 2 : 1;
      const int units = cursor.span(v) / unit;
      const int dispatch_units = (v.tiles_in_minibatch(t.rank, t.minibatch) + unit - 1) / unit;
      const int max_gap = unit * ((units + dispatch_units - 1) / dispatch_units);
      if (last_group_base != cursor.base) last_dispatch = cursor.base - 1;  // the group's first dispatch
      last_group_base = cursor.base;
      if (ticket - last_dispatch > max_gap) return fail("dispatch tasks not spread among the gate/up tasks", t), -1;
      last_dispatch = ticket;
    }
    ++tickets;
    Dependency deps[2];
    const int n = task_dependencies(v, ctr, t, pushed_expected, deps);
    for (int i = 0; i < n; ++i)
      if (counters[deps[i].offset] < deps[i].expected) return fail("dependency not satisfied by earlier tickets", t), -1;
    if (!seen.insert({t.kind, t.rank, t.tile, t.nblock}).second) return fail("task appears twice", t), -1;
    if (t.kind != kTaskCombine) {
      if (t.tile < 0 || t.tile >= v.rank_tiles[t.rank]) return fail("tile outside the rank's used rows", t), -1;
      if (t.tile / P.tpm != t.minibatch) return fail("tile outside its minibatch", t), -1;
      // A dispatch's nblock is its part of the tile (D(0) in parts).
      if (t.nblock < 0 ||
          t.nblock >= (t.kind == kTaskGateUp ? P.n_gu : t.kind == kTaskDown ? P.n_down : v.dispatch_parts(t.minibatch)))
        return fail("column block out of range", t), -1;
    } else if (t.tile < 0 || t.tile % 16 != 0 || t.tile / 16 >= v.combine_blocks) {
      return fail("combine block out of range", t), -1;
    } else if (v.combine_rank >= 0 && t.rank != v.combine_rank) {
      return fail("combine of another rank's tokens in a one-rank launch", t), -1;
    } else if (v.early_combine()) {
      // Its rows lie in steps 0..block_ready: every rank's down tasks of those steps must have smaller tickets.
      const int ready = v.combine_ready_step(t.minibatch);
      if (P.block_ready[t.rank][t.tile / 16] > ready) return fail("combine block placed before its rows", t), -1;
      for (int m = 0; m <= ready; ++m)
        if (step_down_done[m] != v.down_step_tasks(m)) return fail("combine block before a step's down tasks", t), -1;
    }
    const int slot = t.kind == kTaskCombine ? 0 : t.minibatch % P.slots;
    if (t.kind == kTaskDispatch) {
      ++dispatch_tasks[{t.rank, t.tile}];
      int& owner = x_owner[t.rank][slot];
      if (owner != t.minibatch) {
        if (owner >= 0 && gu_done[{t.rank, owner}] != v.tiles_in_minibatch(t.rank, owner) * P.n_gu)
          return fail("dispatch overwrites ring x rows still needed by gate/up", t), -1;
        owner = t.minibatch;
      }
    } else if (t.kind == kTaskGateUp) {
      // Gather mode reads the token buffers, never ring x.
      if (!P.gather && x_owner[t.rank][slot] != t.minibatch)
        return fail("gate/up reads ring x rows of another minibatch", t), -1;
      // Its wait must cover every dispatch task of its tile (all parts in D(0)), not only the first to finish.
      for (int i = 0; i < n; ++i)
        if (deps[i].counter_id == kCtrDispatchDone && deps[i].expected != dispatch_tasks[{t.rank, t.tile}])
          return fail("gate/up waits for fewer dispatch tasks than its tile has", t), -1;
      int& owner = h_owner[t.rank][slot];
      if (owner != t.minibatch) {
        if (owner >= 0 && down_done[{t.rank, owner}] != v.tiles_in_minibatch(t.rank, owner) * P.n_down)
          return fail("gate/up overwrites ring h rows still needed by down", t), -1;
        owner = t.minibatch;
      }
      ++gu_done[{t.rank, t.minibatch}];
    } else if (t.kind == kTaskDown) {
      if (h_owner[t.rank][slot] != t.minibatch) return fail("down reads ring h rows of another minibatch", t), -1;
      ++down_done[{t.rank, t.minibatch}];
      ++step_down_done[t.minibatch];
      for (int s = 0; s < P.R; ++s) {
        counters[ctr.pushed + s] += P.push[t.rank][t.tile][s];
        pushed[s] += P.push[t.rank][t.tile][s];
      }
    }
    Signal sig[2];
    const int m = task_signals(v, ctr, t, sig);
    for (int i = 0; i < m; ++i) counters[sig[i].offset] += 1;
  }
  return tickets;
}

// The steps the order walks (the kernel's prologue): the minibatches, and with overlapped steps one more.
static int steps_of(const Problem& P, const std::vector<int>& tiles, int overlap) {
  int steps = 0;
  for (int r = 0; r < P.R; ++r) steps = std::max(steps, (tiles[r] + P.tpm - 1) / P.tpm);
  return steps > 0 && overlap ? steps + 1 : steps;
}

int main() {
  Problem P;
  int one_rank = 0;  // 1: every rank in its own launches (expert launch per rank, then combine launch per rank)
  int early = 0;     // 1: early combine (tables follow the pushes)
  int overlap = 0;   // 1: overlapped steps (G(s) beside W(s - 1); one step more for the last W)
  int parts = 1;     // D(0)'s dispatch tasks per tile
  int sum_kernel = 0;  // 1: the sums run in a kernel of their own after the launch: no combine tasks
  int pair_units = 0;  // 1: clusters (tickets claimed two at a time)
  int spread = 0;      // 1: spread dispatch (D(s + 1) among G(s))
  if (scanf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", &P.R, &P.tiles_per_rank, &P.tpm, &P.slots, &P.n_gu,
            &P.n_down, &P.combine_blocks, &P.slots_per_rank, &P.gather, &one_rank, &early, &overlap, &parts,
            &sum_kernel, &pair_units, &spread) != 16) return 2;
  const int R = P.R;
  std::vector<int> rank_tiles(R);
  for (int& v : rank_tiles) if (scanf("%d", &v) != 1) return 2;
  P.push.resize(R);
  for (int r = 0; r < R; ++r) {
    P.push[r].assign(rank_tiles[r], std::vector<int>(R));
    for (int m = 0; m < rank_tiles[r]; ++m)
      for (int s = 0; s < R; ++s) if (scanf("%d", &P.push[r][m][s]) != 1) return 2;
  }
  const int max_mb = (P.tiles_per_rank + P.tpm - 1) / P.tpm;
  if (early) {
    P.combine_offsets.resize(R * (max_mb + 1));
    for (int& v : P.combine_offsets) if (scanf("%d", &v) != 1) return 2;
    P.block_ready.assign(R, std::vector<int>(P.combine_blocks));
    for (auto& rank : P.block_ready) for (int& v : rank) if (scanf("%d", &v) != 1) return 2;
  }
  const int pushed_expected = P.slots_per_rank * P.n_down;
  std::vector<long long> pushed(R, 0);
  long long tickets = 0;
  if (!one_rank) {
    const ScheduleView v{R, P.tiles_per_rank, P.tpm, P.slots, max_mb, P.n_gu, P.n_down, P.combine_blocks,
                         steps_of(P, rank_tiles, overlap), rank_tiles.data(), P.gather, -1,
                         early ? P.combine_offsets.data() : nullptr, overlap,
                         early || sum_kernel ? 0 : R * P.combine_blocks, parts, pair_units, spread};
    tickets = run_launch(P, v, pushed_expected, pushed);
    if (tickets < 0) return 1;
  } else {
    // sm90_moe_forward.cuh with local_rank = r: phases 1 keeps only rank r's tiles and no combine blocks.
    for (int r = 0; r < R; ++r) {
      std::vector<int> tiles(R, 0);
      tiles[r] = rank_tiles[r];
      const ScheduleView v{R, P.tiles_per_rank, P.tpm, P.slots, max_mb, P.n_gu, P.n_down, 0,
                           steps_of(P, tiles, overlap), tiles.data(), P.gather, r, nullptr, overlap, 0, parts,
                           pair_units, spread};
      const long long n = run_launch(P, v, pushed_expected, pushed);
      if (n < 0) return 1;
      tickets += n;
    }
    // The barrier between the launches: every rank's pushes have landed before any combine launch starts.
    for (int s = 0; s < R; ++s)
      if (pushed[s] != pushed_expected) {
        printf("FAIL before the combine launches: pushed[%d] = %lld, expected %d\n", s, pushed[s], pushed_expected);
        return 1;
      }
    // Phases 2: no tiles, only rank r's combine blocks, no wait on the (other GPUs') pushes.
    for (int r = 0; r < R; ++r) {
      std::vector<int> none(R, 0);
      std::vector<long long> unused(R, 0);
      const ScheduleView v{R, P.tiles_per_rank, P.tpm, P.slots, max_mb, P.n_gu, P.n_down, P.combine_blocks, 0,
                           none.data(), P.gather, r, nullptr, overlap, P.combine_blocks, 1, pair_units, spread};
      const long long n = run_launch(P, v, 0, unused);
      if (n < 0) return 1;
      tickets += n;
    }
  }
  // (With the sum kernel no combine task runs; the final check below is what it relies on: every push counted.)
  long long expected_tasks = sum_kernel ? 0 : static_cast<long long>(R) * P.combine_blocks;
  for (int r = 0; r < R; ++r) {
    expected_tasks += static_cast<long long>(rank_tiles[r]) * ((P.gather ? 0 : 1) + P.n_gu + P.n_down);
    // D(0) in parts: parts - 1 more tasks per tile of the first minibatch
    if (!P.gather) expected_tasks += static_cast<long long>(std::min(rank_tiles[r], P.tpm)) * (parts - 1);
  }
  if (tickets != expected_tasks) {
    printf("FAIL %lld tickets, expected %lld tasks\n", tickets, expected_tasks);
    return 1;
  }
  for (int s = 0; s < R; ++s)
    if (pushed[s] != pushed_expected) {
      printf("FAIL pushed[%d] = %lld, expected %d\n", s, pushed[s], pushed_expected);
      return 1;
    }
  printf("OK %lld tickets %lld pairs %lld gate_up\n", tickets, pairs, gate_up_tasks);
  return 0;
}
"""


@pytest.fixture(scope="module")
def schedule_simulator(tmp_path_factory):
    return compile_host_program(SIM_SOURCE, tmp_path_factory.mktemp("sim"), "sim")


# (ranks, tokens, top_k, experts, hidden, intermediate, minibatch_rows, ring_slots, skew)
# Top-1 cases run with the fused combine (the kernel's default there): no combine tasks at all.
SCHEDULE_CASES = [
    (1, 512, 4, 8, 256, 128, 256, 1, 0.0),
    (1, 300, 2, 4, 512, 192, 128, 2, 0.0),      # tokens not a tile multiple, I % 128 == 64
    (2, 512, 4, 8, 1024, 256, 128, 2, 0.0),
    (4, 1024, 2, 16, 256, 128, 384, 1, 3.0),    # skewed: empty and hot experts, ring of one minibatch
    (8, 1024, 8, 64, 512, 256, 256, 3, 0.0),
    (8, 64, 2, 8, 64, 64, 128, 1, 8.0),         # almost everything on one expert
    (1, 2048, 1, 6, 7168, 2048, 2176, 4, 0.0),  # an EP-64 slice in miniature: top-1, fused combine
    (4, 512, 1, 8, 256, 128, 128, 1, 4.0),      # top-1, fused, skewed, ring of one minibatch
    (2, 1024, 4, 8, 512, 384, 1024, 2, 1.0),    # 8-tile steps, 3 gate/up blocks: whole bands of 4 tiles (G(s))
]


def _simulator_input(ranks, tokens, top_k, experts, hidden, intermediate, minibatch_rows, ring_slots, skew, gather,
                     one_rank=False, early=False, overlap=False, parts=1, sum_kernel=False, pair_units=False,
                     spread=False):
    gen = torch.Generator().manual_seed(tokens + experts + ranks)
    logits = torch.randn(tokens, experts, generator=gen) - skew * torch.arange(experts, dtype=torch.float32)
    _, ids = mok.route(logits, top_k)
    sched = mok.build_schedule(ids, experts, ranks, tile=128)
    rank_tiles = (sched.segment_offsets[:, -1] // 128).tolist()
    fused = top_k == 1  # csrc/sm90_moe_forward.cu: no combine blocks when the top-1 combine is fused
    combine_blocks = 0 if fused else math.ceil(tokens // ranks / 16)
    lines = [" ".join(str(v) for v in (ranks, sched.capacity // 128, minibatch_rows // 128, ring_slots,
                                       math.ceil(intermediate / 128), math.ceil(hidden / 256),
                                       combine_blocks, tokens // ranks * top_k, int(gather), int(one_rank),
                                       int(early), int(overlap), parts, int(sum_kernel), int(pair_units),
                                       int(spread))),
             " ".join(str(t) for t in rank_tiles)]
    for r in range(ranks):
        for m in range(rank_tiles[r]):
            src = sched.src_rank[r, m * 128:(m + 1) * 128]
            lines.append(" ".join(str(c) for c in torch.bincount(src[src >= 0].long(), minlength=ranks).tolist()))
    if early:
        order, offsets = combine_order(KernelSchedule.from_schedule(sched), minibatch_rows)
        lines.append(" ".join(str(v) for v in offsets.reshape(-1).tolist()))
        # Each block's last step with one of its rows, from the inverse map (not from combine_order's own work).
        token_ready = (sched.dest_row.long() // minibatch_rows).view(ranks, tokens // ranks, top_k).amax(2)
        for r in range(ranks):
            ready = token_ready[r][order[r].long()].tolist()
            lines.append(" ".join(str(max(ready[b:b + 16])) for b in range(0, len(ready), 16)))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("launches", ["emulated", "emulated/early-combine", "one-rank", "emulated/overlap-steps",
                                      "one-rank/overlap-steps", "emulated/sum-kernel"])
@pytest.mark.parametrize("dispatch", ["ring", "ring/first-dispatch-3-parts", "ring/first-dispatch-8-parts", "gather",
                                      "ring/spread", "ring/spread/first-dispatch-3-parts"])
@pytest.mark.parametrize("case", SCHEDULE_CASES, ids=lambda c: "R{}-T{}-K{}-E{}-H{}-I{}-mb{}-slots{}-skew{}".format(*c))
@needs_nvcc
def test_task_order_cannot_deadlock(schedule_simulator, case, dispatch, launches):
    """Every task once, every dependency met by earlier tickets, every push counted: all ranks in one launch
    (emulated, with or without early combine: then every combine block also runs only after every rank's down
    tasks of the steps holding its tokens' rows; or with the sums in the sum kernel: no combine task, every push
    counted when the launch ends), or one real rank per launch (an expert launch per rank, a barrier, a combine
    launch per rank); the first minibatch's dispatch in one task per tile or in parts; the next minibatch's
    dispatches in their own group or spread among the gate/up tasks (and then evenly)."""
    early = launches == "emulated/early-combine"
    sum_kernel = launches == "emulated/sum-kernel"
    if (early or sum_kernel) and case[2] == 1:
        pytest.skip("top-1 layers fuse the combine: no combine blocks to place or sums to run")
    overlap = launches.endswith("overlap-steps")
    if overlap and case[7] < 2:
        pytest.skip("overlapped steps need a ring of 2 or more minibatches (the launch refuses 1)")
    spread = "spread" in dispatch
    if spread and (overlap or case[7] < 2):
        pytest.skip("spread dispatch needs a ring of 2 or more minibatches and no overlapped steps (the launch "
                    "refuses them)")
    parts = int(re.search(r"first-dispatch-(\d+)-parts", dispatch)[1]) if "parts" in dispatch else 1  # D(0) in parts
    stdin = _simulator_input(*case, dispatch == "gather", one_rank=launches.startswith("one-rank"), early=early,
                             overlap=overlap, parts=parts, sum_kernel=sum_kernel, spread=spread)
    proc = subprocess.run([str(schedule_simulator)], input=stdin, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr


@needs_nvcc
def test_spread_dispatch_with_a_ring_of_one_minibatch_would_deadlock(schedule_simulator):
    """Why the launch refuses spread dispatch with a ring of one minibatch (of several): D(s + 1) would then wait for
    G(s), which shares its group, and the simulator sees a dependency on a later ticket (it can fail)."""
    case = (2, 1024, 4, 8, 512, 384, 512, 1, 0.0)  # 4 minibatches of 4 tiles per rank, a ring of one
    ok = subprocess.run([str(schedule_simulator)], input=_simulator_input(*case, False), capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stdout
    bad = subprocess.run([str(schedule_simulator)], input=_simulator_input(*case, False, spread=True),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "dependency not satisfied by earlier tickets" in bad.stdout, bad.stdout


@pytest.mark.parametrize("spread", [False, True], ids=["", "spread"])
@pytest.mark.parametrize("launches", ["emulated", "one-rank", "emulated/sum-kernel"])
@pytest.mark.parametrize("case", SCHEDULE_CASES, ids=lambda c: "R{}-T{}-K{}-E{}-H{}-I{}-mb{}-slots{}-skew{}".format(*c))
@needs_nvcc
def test_task_order_in_cluster_units(schedule_simulator, case, launches, spread):
    """With clusters (ScheduleView::pair_units) the same order, padded so that the tickets a cluster claims two at a
    time never straddle two groups: every task once, every dependency met by earlier tickets. And the units of a
    gate/up group are pairs of row tiles of one column block, but for an odd tile of a step (and the last band's
    third tile) and a partial last band's tile-major tail: counted against the order's own arithmetic. With spread
    dispatch too: the dispatch units among the gate/up units leave the pairs as they were."""
    sum_kernel = launches == "emulated/sum-kernel"
    if sum_kernel and case[2] == 1:
        pytest.skip("top-1 layers fuse the combine: no sums to run")
    if spread and case[7] < 2:
        pytest.skip("spread dispatch needs a ring of 2 or more minibatches (the launch refuses 1)")
    stdin = _simulator_input(*case, False, one_rank=launches == "one-rank", sum_kernel=sum_kernel, parts=3,
                             pair_units=True, spread=spread)
    proc = subprocess.run([str(schedule_simulator)], input=stdin, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr
    _, _, _, pairs, _, gate_up, _ = proc.stdout.split()
    # Expected: per rank and step of t tiles, bands of 4 (2 pairs per column), then a last band of r = t % 4 tiles:
    # r = 2 or 3 gives one pair per column (a band of 2), r = 1 or the third tile none.
    gnb = math.ceil(case[5] / 128)
    tpm = case[6] // 128
    rank_tiles = [int(t) for t in stdin.splitlines()[1].split()]
    expected = 0
    for tiles in rank_tiles:
        for first in range(0, tiles, tpm):
            t = min(tpm, tiles - first)
            expected += (t // 4 * 2 + (1 if t % 4 >= 2 else 0)) * gnb
    assert int(pairs) == expected, (pairs, expected)
    assert 2 * int(pairs) <= int(gate_up)


# ------------------------------------------------------------------------------------------------------
# The launch function's checks of (R, E, local_rank, phases), on the host: they run before any CUDA call
# ------------------------------------------------------------------------------------------------------

LAUNCH_CHECK_SOURCE = r"""
// Calls sm90_moe_forward with valid sizes, null pointers and the (R, E, local_rank, phases, order (bit 0:
// overlap_steps, bit 1: spread_dispatch, bit 2: gather mode), ring minibatches, y, y_rows, top_k, mxfp8, ping_pong, sum_kernel, combine) of each input line (capacity: 2 minibatches;
// y: 0 none, 1 an aligned stand-in address, 2 a misaligned one; y_rows: 0 none, 1 a stand-in; mxfp8: packed rows of
// 144 bytes; ping_pong: 0 none, else down_ping_pong in the pipelined variant, 1 without the signal warp, 2 with it, 3
// without it at I = 512; combine: 0 the combine tasks, 1 the fused top-1 combine, 2 early combine with stand-in
// orders; clusters: 0 none, else clusters in the pipelined variant in ring mode (1), the simple variant (2), the pipelined
// variant in gather mode (3), or with overlap_steps (4)); prints its return code and message. A combination the
// checks accept stops at the null-pointer check (the stand-ins are never dereferenced).
#include <cstdio>
#include "mok/launch.cuh"
int main() {
  int ranks, experts, local_rank, phases, overlap, ring_minibatches, y, y_rows, top_k, mxfp8, ping_pong, sum_kernel,
      combine, clusters;
  while (scanf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d", &ranks, &experts, &local_rank, &phases, &overlap,
               &ring_minibatches, &y, &y_rows, &top_k, &mxfp8, &ping_pong, &sum_kernel, &combine, &clusters) == 14) {
    static int stand_in[64];
    mok::sm90::Sm90MoeProblem q;
    q.num_ranks = ranks;
    q.tokens_per_rank = 128;
    q.top_k = top_k;
    q.hidden = q.intermediate = 128;
    q.num_experts = experts;
    q.capacity = 256;
    q.minibatch_rows = 128;
    q.ring_rows = 128 * ring_minibatches;
    q.local_rank = local_rank;
    q.phases = phases;
    q.overlap_steps = (overlap & 1) != 0;
    q.spread_dispatch = (overlap & 2) != 0;
    q.gather_x = (overlap & 4) != 0;
    q.sum_kernel = sum_kernel != 0;
    q.fuse_top1 = combine == 1;
    if (combine == 2) {
      q.combine_tokens = stand_in;
      q.combine_offsets = stand_in;
    }
    q.y = y == 0 ? nullptr : reinterpret_cast<char*>(stand_in) + (y == 2 ? 8 : 0);
    q.y_rows = y_rows == 0 ? nullptr : stand_in;
    q.mxfp8 = mxfp8 != 0;
    q.x_row_bytes = mxfp8 != 0 ? 144 : 0;  // H + H / 32 = 132, padded to 16 bytes
    if (ping_pong != 0) {
      q.down_ping_pong = true;
      q.variant = mok::sm90::Sm90Variant::kPipelined;
      q.signal_warp = ping_pong == 2;
      if (ping_pong == 3) q.intermediate = 512;
    }
    if (clusters != 0) {
      q.clusters = true;
      q.variant = clusters == 2 ? mok::sm90::Sm90Variant::kSimple : mok::sm90::Sm90Variant::kPipelined;
      q.gather_x = clusters == 3;
      if (clusters == 4) q.overlap_steps = true;
    }
    char message[512] = "";
    const int rc = mok::sm90::sm90_moe_forward(q, nullptr, message, sizeof(message));
    printf("%d %s\n", rc, message);
  }
  return 0;
}
"""

ACCEPTED = "a required device pointer is null"  # every check of the combination passed
# (R, E, local_rank, phases, order (1: overlap_steps, 2: spread_dispatch, 4: gather mode), ring minibatches) -> the
# message the launch function stops with
LAUNCH_CHECK_CASES = {
    (2, 8, -1, 3, 0, 1): ACCEPTED,                  # emulated ranks: every phase in one launch
    (2, 4, 0, 1, 0, 1): ACCEPTED,                   # real rank 0 of 2: its expert launch (E = its own 4 experts)
    (2, 4, 1, 2, 0, 1): ACCEPTED,                   # real rank 1 of 2: its combine launch
    (1, 4, 0, 3, 0, 1): ACCEPTED,                   # a single real rank may run both phases (all pushes are its own)
    (2, 8, -1, 1, 0, 1): "emulated ranks run every phase in one launch",
    (2, 8, -1, 2, 0, 1): "emulated ranks run every phase in one launch",
    (2, 4, 0, 3, 0, 1): "separate launches",        # its combine would wait for pushes from the other GPU
    (2, 4, 2, 1, 0, 1): "local_rank (2) must be -1 or in [0, num_ranks=2)",
    (2, 8, -2, 3, 0, 1): "local_rank (-2) must be -1 or in [0, num_ranks=2)",
    (2, 4, 0, 0, 0, 1): "phases must be 1",
    (2, 4, 0, 4, 0, 1): "phases must be 1",
    (2, 7, -1, 3, 0, 1): "must be a multiple of num_ranks",
    (2, 0, 0, 1, 0, 1): "must be a multiple of num_ranks",
    (2, 8, -1, 3, 1, 2): ACCEPTED,            # overlapped steps with a ring of both minibatches
    (2, 8, -1, 3, 1, 1): "overlap_steps needs a ring of at least 2 minibatches",  # G(s) would wait for W(s - 1)
    (2, 8, -1, 3, 2, 2): ACCEPTED,            # spread dispatch with a ring of both minibatches
    (2, 8, -1, 3, 2, 1): "spread_dispatch needs a ring of at least 2 minibatches",  # D(s + 1) would wait for G(s)
    (2, 8, -1, 3, 3, 2): "and no overlap_steps",  # both orders at once
    (2, 8, -1, 3, 6, 1): ACCEPTED,            # gather mode has no dispatch tasks: spread_dispatch is ignored
}
# down_tma: (the above's six, y, y_rows, top_k, mxfp8) -> the message
DOWN_TMA_CHECK_CASES = {
    (2, 8, -1, 3, 0, 1, 1, 1, 2, 0): ACCEPTED,   # emulated ranks, y and its inverse map
    (2, 8, -1, 3, 0, 1, 1, 0, 2, 0): "down_tma needs both y and y_rows",
    (2, 8, -1, 3, 0, 1, 0, 1, 2, 0): "down_tma needs both y and y_rows",
    (2, 4, 0, 1, 0, 1, 1, 1, 2, 0): "down_tma is for emulated ranks",  # a real rank's rows go to other GPUs' slots
    (2, 8, -1, 3, 0, 1, 2, 1, 2, 0): "y must be 16-byte aligned",
    (2, 8, -1, 3, 0, 1, 1, 1, 256, 0): ACCEPTED,  # the combine's (row, weight) table fills the staging
    (2, 8, -1, 3, 0, 1, 1, 1, 257, 0): "down_tma supports top_k up to 256",
    (2, 8, -1, 3, 0, 1, 0, 0, 2, 1): ACCEPTED,   # an MXFP8 layer (ring mode) with the push
    (2, 8, -1, 3, 0, 1, 1, 1, 2, 1): "down_tma is not tested with MXFP8",
}
# down_ping_pong: (the above's ten, ping_pong) -> the message
PING_PONG_CHECK_CASES = {
    (2, 8, -1, 3, 0, 1, 1, 1, 2, 0, 1): ACCEPTED,          # down_tma, pipelined, no signal warp, I = 128
    (2, 8, -1, 3, 0, 1, 0, 0, 2, 0, 1): "down_ping_pong needs down_tma",  # the push
    (2, 8, -1, 3, 0, 1, 1, 1, 2, 0, 2): "down_ping_pong needs down_tma",  # the signal warp (ring mode)
    (2, 8, -1, 3, 0, 1, 1, 1, 2, 0, 3): "I <= 256",        # a turn would need more stages than the ring holds
}
# sum_kernel: (the above's eleven, sum_kernel, combine) -> the message
SUM_KERNEL_CHECK_CASES = {
    (2, 8, -1, 3, 0, 1, 0, 0, 2, 0, 0, 1, 0): ACCEPTED,       # emulated ranks, the pushed slots
    (2, 8, -1, 3, 0, 1, 1, 1, 2, 0, 0, 1, 0): ACCEPTED,       # emulated ranks, y through the inverse map
    (2, 8, -1, 3, 0, 1, 0, 0, 64, 0, 0, 1, 0): ACCEPTED,      # the table's largest top-k
    (2, 8, -1, 3, 0, 1, 0, 0, 65, 0, 0, 1, 0): "sum_kernel supports top_k up to 64",
    (2, 4, 0, 1, 0, 1, 0, 0, 2, 0, 0, 1, 0): "sum_kernel is for emulated ranks",  # its grid covers every rank
    (2, 8, -1, 3, 0, 1, 0, 0, 1, 0, 0, 1, 1): "sum_kernel is for emulated ranks",  # fused top-1: no sums to run
    (2, 8, -1, 3, 0, 1, 0, 0, 2, 0, 0, 1, 2): "without early combine",            # its sums run inside the steps
    (2, 8, -1, 3, 0, 1, 0, 0, 2, 0, 0, 0, 2): ACCEPTED,       # early combine with the combine tasks
}
# clusters: (the above's thirteen, clusters) -> the message
CLUSTERS_CHECK_CASES = {
    (2, 8, -1, 3, 0, 2, 0, 0, 2, 0, 0, 0, 0, 1): ACCEPTED,    # pipelined, ring mode, the signal warp
    (2, 8, -1, 3, 2, 2, 0, 0, 2, 0, 0, 0, 0, 1): ACCEPTED,    # ... with spread dispatch
    (2, 4, 0, 1, 0, 2, 0, 0, 2, 0, 0, 0, 0, 1): ACCEPTED,     # one real rank's expert launch
    (2, 8, -1, 3, 0, 2, 0, 0, 2, 0, 0, 0, 0, 2): "clusters need the pipelined variant",  # simple: no pair scheduler
    (2, 8, -1, 3, 0, 2, 0, 0, 2, 0, 0, 0, 0, 3): "clusters need the pipelined variant",  # gather: no signal warp
    (2, 8, -1, 3, 0, 2, 0, 0, 2, 0, 0, 0, 0, 4): "clusters need the pipelined variant",  # overlap_steps
    (2, 8, -1, 3, 0, 2, 1, 1, 2, 0, 1, 0, 0, 1): "clusters need the pipelined variant",  # ping-pong, no signal warp
}


@needs_nvcc
def test_launch_checks_refuse_inconsistent_rank_launches(kernel_object, tmp_path):
    obj, _ = kernel_object
    exe = compile_host_program(LAUNCH_CHECK_SOURCE, tmp_path, "launch_checks", str(obj))
    # no y, top-2, bf16, no ping-pong, the combine tasks
    cases = [(case + (0, 0, 2, 0, 0, 0, 0, 0), want) for case, want in LAUNCH_CHECK_CASES.items()]
    cases += [(case + (0, 0, 0, 0), want) for case, want in DOWN_TMA_CHECK_CASES.items()]
    cases += [(case + (0, 0, 0), want) for case, want in PING_PONG_CHECK_CASES.items()]
    cases += [(case + (0,), want) for case, want in SUM_KERNEL_CHECK_CASES.items()]
    cases += list(CLUSTERS_CHECK_CASES.items())
    run = subprocess.run([str(exe)], input="".join(" ".join(map(str, case)) + "\n" for case, _ in cases),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == len(cases), run.stdout
    for (case, want), line in zip(cases, lines):
        rc, message = line.split(" ", 1)
        assert rc == "1" and want in message, f"{case}: {line}"


# ------------------------------------------------------------------------------------------------------
# The wgmma descriptor against CuTe's
# ------------------------------------------------------------------------------------------------------

DESC_SOURCE = r"""
#include <cstdio>
#include <cstdint>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include "mok/gemm_mainloop.cuh"
using namespace cute;
int main() {
  // A 128 x 64 bf16 K-major tile in the 128B-swizzle layout (what one TMA box lands), at address 0.
  auto layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<bfloat16_t>{}, Shape<_128, _64>{});
  auto tile = make_tensor(make_smem_ptr(static_cast<bfloat16_t*>(nullptr)), layout);
  int bad = 0;
  for (int k = 0; k < 4; ++k) {
    auto slice = local_tile(tile, Shape<_128, _16>{}, make_coord(0, k));  // one wgmma k16 step
    // On the host CuTe cannot read the shared-memory address, so compare the fields separately: layout
    // type, leading and stride byte offsets from the descriptor; the start address from the slice pointer.
    const uint64_t cute_fields = GMMA::make_gmma_desc<GMMA::Major::K>(slice).desc_ & ~uint64_t(0x3FFF);
    const uint64_t cute_start = reinterpret_cast<uintptr_t>(raw_pointer_cast(slice.data())) >> 4;
    const uint64_t mine = mok::sm90::make_sw128_kmajor_desc(0) + (uint64_t(k) * 32 >> 4);
    printf("k=%d cute fields=%016llx start=%llu | mine=%016llx\n", k, (unsigned long long)cute_fields,
           (unsigned long long)cute_start, (unsigned long long)mine);
    bad |= (mine & ~uint64_t(0x3FFF)) != cute_fields || (mine & 0x3FFF) != cute_start;
  }
  // The gather mode's cp.async destinations (sm90 gemm_mainloop.cuh) against the same layout: chunk c (8 bf16)
  // of row r must land where element (r, 8c) of the SW128 tile lives.
  // (The address comes from the tensor: CuTe applies the swizzle to the shared-memory pointer, in bytes.)
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 8; ++c) {
      const uintptr_t cute_offset = reinterpret_cast<uintptr_t>(raw_pointer_cast(&tile(r, 8 * c)));
      if (mok::sm90::sw128_chunk_offset(r, c) != cute_offset) {
        printf("gather chunk offset differs at row %d chunk %d: %u vs %llu\n", r, c, mok::sm90::sw128_chunk_offset(r, c),
               (unsigned long long)cute_offset);
        bad = 1;
      }
    }
  return bad;
}
"""


def run_cute_host_program(source: str, directory, name: str) -> None:
    """Builds ``source`` (mok headers and CuTe) into a host program and asserts that it exits with 0 (it prints what
    differs); skips without the CUTLASS headers."""
    cutlass = build.cutlass_include_dirs()
    if not cutlass:
        pytest.skip("CUTLASS headers (nvidia-cutlass wheel) not installed")
    exe = compile_host_program(source, directory, name, "--expt-relaxed-constexpr", *[f"-I{d}" for d in cutlass])
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@needs_nvcc
def test_wgmma_descriptor_matches_cute(tmp_path):
    run_cute_host_program(DESC_SOURCE, tmp_path, "desc")


# ------------------------------------------------------------------------------------------------------
# The epilogue staging layouts: each warpgroup in its own bytes, and the TMA boxes in CuTe's 128B swizzle
# ------------------------------------------------------------------------------------------------------

STAGING_SOURCE = r"""
#include <cstdio>
#include <cstdint>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include "mok/epilogue_staging.cuh"
using namespace cute;
using Tiles = mok::sm90::Sm90Tiles;
using mok::sm90::StagingLayout;
int main() {
  int bad = 0;
  static bool used[2][Tiles::kBlockM * Tiles::kStagingPitch / 16] = {};
  for (int row = 0; row < Tiles::kBlockM; ++row)
    for (int chunk = 0; chunk < 16; ++chunk) {
      const uint32_t offsets[2] = {mok::sm90::staging_offset<Tiles, StagingLayout::kRows>(row, chunk),
                                   mok::sm90::staging_offset<Tiles, StagingLayout::kTmaBoxes>(row, chunk)};
      for (int l = 0; l < 2; ++l) {
        // Warpgroup row / 64 owns its rows' bytes in both layouts: the warpgroups need not meet between tasks.
        const uint32_t lo = (row / 64) * Tiles::kStagingWarpgroupBytes;
        if (offsets[l] < lo || offsets[l] >= lo + Tiles::kStagingWarpgroupBytes || offsets[l] % 16 != 0 ||
            used[l][offsets[l] / 16]) {
          printf("layout %d: row %d chunk %d at %u (outside warpgroup %d's bytes, misaligned or taken twice)\n", l,
                 row, chunk, offsets[l], row / 64);
          bad = 1;
        } else {
          used[l][offsets[l] / 16] = true;
        }
      }
    }
  // A TMA box (64 rows x 64 bf16, 128B swizzle) at its base reads element (r, 8c) where CuTe's SW128 K-major layout
  // puts it; the box base of warpgroup w, box b is what store_down_block_tma passes.
  auto layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<bfloat16_t>{}, Shape<_64, _64>{});
  auto tile = make_tensor(make_smem_ptr(static_cast<bfloat16_t*>(nullptr)), layout);
  for (int w = 0; w < 2; ++w)
    for (int b = 0; b < 2; ++b)
      for (int r = 0; r < 64; ++r)
        for (int c = 0; c < 8; ++c) {
          const uintptr_t cute_offset = reinterpret_cast<uintptr_t>(raw_pointer_cast(&tile(r, 8 * c)));
          const uint32_t mine = mok::sm90::staging_offset<Tiles, StagingLayout::kTmaBoxes>(64 * w + r, 8 * b + c) -
                                (w * Tiles::kStagingWarpgroupBytes + b * Tiles::kStagingBoxBytes);
          if (mine != cute_offset) {
            printf("box (w %d, b %d) row %d chunk %d: %u, CuTe %llu\n", w, b, r, c, mine,
                   (unsigned long long)cute_offset);
            bad = 1;
          }
        }
  return bad;
}
"""


@needs_nvcc
def test_staging_layouts_keep_each_warpgroup_in_its_bytes_and_match_cute(tmp_path):
    """Round 19's review: the first TMA box layout put warpgroup 0's rows into warpgroup 1's bytes of the row layout,
    a race where the warpgroups run tasks apart (the signal warp). Both layouts must keep each warpgroup's rows in
    its own 16 KB, use each 16-byte chunk once, and the TMA boxes must be what a 128B-swizzled box reads (CuTe's
    SW128 K-major layout of a 64 x 64 bf16 tile at the box base)."""
    run_cute_host_program(STAGING_SOURCE, tmp_path, "staging")


# ------------------------------------------------------------------------------------------------------
# The counter block size: Python (mok/cuda/workspace.py) against CounterLayout::make (workspace.cuh)
# ------------------------------------------------------------------------------------------------------

COUNTER_SOURCE = r"""
#include <cstdio>
#include "mok/workspace.cuh"
int main() {
  int ranks, capacity, minibatch_rows;
  while (scanf("%d %d %d", &ranks, &capacity, &minibatch_rows) == 3) {
    const int max_minibatches = (capacity + minibatch_rows - 1) / minibatch_rows;
    printf("%d\n", mok::sm90::CounterLayout::make(ranks, capacity / 128, max_minibatches).total);
  }
  return 0;
}
"""


@needs_nvcc
def test_counter_block_size_matches_the_kernel_layout(tmp_path):
    from mok.cuda.workspace import counter_ints
    exe = compile_host_program(COUNTER_SOURCE, tmp_path, "counters")
    cases = [(1, 128, 128), (2, 1024, 256), (8, 17152, 2176), (64, 556800, 16896), (3, 384, 384)]
    run = subprocess.run([str(exe)], input="".join(f"{r} {c} {m}\n" for r, c, m in cases), capture_output=True,
                         text=True, timeout=60)
    assert [int(v) for v in run.stdout.split()] == [counter_ints(*case) for case in cases]


TICKET_SOURCE = r"""
#include <cstdio>
#include "mok/workspace.cuh"
int main() {
  int ranks, capacity, hidden, intermediate, dispatch, combine_blocks, down_span, parts, minibatch_tiles;
  while (scanf("%d %d %d %d %d %d %d %d %d", &ranks, &capacity, &hidden, &intermediate, &dispatch, &combine_blocks,
               &down_span, &parts, &minibatch_tiles) == 9) {
    printf("%lld\n", mok::sm90::launch_tickets<mok::sm90::Sm90Tiles>(ranks, capacity, hidden, intermediate,
                                                                     dispatch != 0, combine_blocks, down_span, parts,
                                                                     minibatch_tiles));
  }
  return 0;
}
"""


@needs_nvcc
def test_ticket_count_matches_the_kernels(tmp_path):
    """The task count that sizes the timeline buffer (workspace.launch_tickets) is the kernel's own formula
    (launch_tickets in workspace.cuh, which the launch checks against 32-bit tickets: an upper bound of what the
    scheduler hands out, with every tile of the capacity and the most parts of the first dispatch), for odd sizes
    too."""
    from mok.cuda.workspace import launch_tickets
    exe = compile_host_program(TICKET_SOURCE, tmp_path, "tickets")
    cases = [(1, 128, 64, 64, 1, 1, 1, 1, 0), (4, 1024, 7168, 2048, 1, 128, 1, 1, 4),
             (8, 2176, 4096, 256, 0, 64, 1, 8, 17), (64, 17152, 1536, 320, 1, 0, 1, 1, 1),
             (3, 384, 4160, 192, 0, 5, 1, 1, 3), (8, 2176, 4096, 256, 0, 64, 2, 1, 1),
             (2, 1024, 4096, 256, 1, 16, 4, 4, 33), (64, 17152, 1536, 320, 1, 0, 3, 3, 2),
             (1, 20480 // 128 * 128, 4096, 1024, 1, 0, 1, 8, 33)]  # the qwen slice, D(0) in 8 parts
    run = subprocess.run([str(exe)], input="".join(" ".join(map(str, c)) + "\n" for c in cases), capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert [int(v) for v in run.stdout.split()] == [launch_tickets(*case) for case in cases]


TILE_SOURCE = r"""
#include <cstdio>
#include "mok/launch.cuh"
#include "mok/workspace.cuh"
int main() {
  printf("%d %d %d %d %d\n", mok::sm90::Sm90Tiles::kBlockM, mok::sm90::Sm90Tiles::kHalfN,
         mok::sm90::Sm90Tiles::kBlockN, mok::sm90::kSm90TraceFields, mok::sm90::Sm90Tiles::kMaxFirstDispatchParts);
  return 0;
}
"""


@needs_nvcc
def test_python_tile_sizes_match_the_kernel(tmp_path):
    from mok.cuda.backend import TRACE_FIELDS
    from mok.cuda.workspace import BLOCK_M, DOWN_COLUMNS, GATE_UP_COLUMNS, MAX_FIRST_DISPATCH_PARTS
    run = subprocess.run([str(compile_host_program(TILE_SOURCE, tmp_path, "tiles"))], capture_output=True, text=True,
                         timeout=60)
    assert [int(v) for v in run.stdout.split()] == [BLOCK_M, GATE_UP_COLUMNS, DOWN_COLUMNS, len(TRACE_FIELDS),
                                                    MAX_FIRST_DISPATCH_PARTS]


# ------------------------------------------------------------------------------------------------------
# The backend's schedule tables against mok.build_schedule (the device kernels' logic is replayed below;
# on a CPU build_kernel_schedule is build_schedule itself)
# ------------------------------------------------------------------------------------------------------

def _random_routing(seed: int):
    gen = torch.Generator().manual_seed(seed)
    ranks = (1, 2, 4, 8)[seed % 4]
    experts = ranks * int(torch.randint(1, 9, (1,), generator=gen))
    top_k = int(torch.randint(1, min(experts, 8) + 1, (1,), generator=gen))
    tokens = ranks * int(torch.randint(1, 300, (1,), generator=gen))
    skew = 6.0 * float(torch.rand(1, generator=gen)) if seed % 3 == 0 else 0.0
    logits = torch.randn(tokens, experts, generator=gen) - skew * torch.arange(experts, dtype=torch.float32)
    _, ids = mok.route(logits, top_k)
    return (ids if seed % 2 else ids.long()), experts, ranks


def test_kernel_schedule_with_explicit_capacity_is_checked():
    from mok.cuda.schedule_tables import build_kernel_schedule
    from mok.schedule import ScheduleCapacityError
    ids, experts, ranks = _random_routing(5)
    with pytest.raises(ScheduleCapacityError):
        build_kernel_schedule(ids, experts, ranks, tile=128, capacity=128)


# ------------------------------------------------------------------------------------------------------
# The workspace cache (CPU tensors: only the bookkeeping is checked here; launches run on the GPU)
# ------------------------------------------------------------------------------------------------------

def _cpu_problem(tokens=256, hidden=128, intermediate=64, experts=8, top_k=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    weights, ids = mok.route(torch.randn(tokens, experts, generator=gen), top_k)
    w_gate = torch.randn(experts, intermediate, hidden, generator=gen).to(torch.bfloat16)
    w_up = torch.randn(experts, intermediate, hidden, generator=gen).to(torch.bfloat16)
    w_down = torch.randn(experts, hidden, intermediate, generator=gen).to(torch.bfloat16)
    return x, ids, weights, w_gate, w_up, w_down


def test_workspace_is_reused_for_equal_sizes_only():
    from mok.cuda import backend, workspace
    workspace.release_workspaces()
    a = backend.prepare(*_cpu_problem(seed=1), ep_size=2, reuse_workspace=True)
    b = backend.prepare(*_cpu_problem(seed=2), ep_size=2, reuse_workspace=True)
    assert a.workspace is b.workspace and a.out.data_ptr() != b.out.data_ptr()
    c = backend.prepare(*_cpu_problem(seed=1), ep_size=4, reuse_workspace=True)
    assert c.workspace is not a.workspace
    private = backend.prepare(*_cpu_problem(seed=1), ep_size=2)
    assert private.workspace is not a.workspace
    for k in range(workspace.MAX_CACHED_WORKSPACES + 2):
        backend.prepare(*_cpu_problem(tokens=128 * (k + 1)), reuse_workspace=True)
    assert len(workspace.cached_workspaces()) == workspace.MAX_CACHED_WORKSPACES
    workspace.release_workspaces()
    assert not workspace.cached_workspaces()


def test_pointer_tables_address_each_ranks_rows():
    from mok.cuda import backend, workspace
    x, ids, weights, wg, wu, wd = _cpu_problem(tokens=256, hidden=128, top_k=2)
    prep = backend.prepare(x, ids, weights, wg, wu, wd, ep_size=4)
    per_rank = 256 // 4
    assert prep.x_ptrs.tolist() == [prep.x.data_ptr() + r * per_rank * 128 * 2 for r in range(4)]
    assert prep.weight_ptrs.tolist() == [prep.weights.data_ptr() + r * per_rank * 2 * 4 for r in range(4)]
    assert prep.out_ptrs.tolist() == [prep.out.data_ptr() + r * per_rank * 128 * 2 for r in range(4)]
    assert prep.combine_ptrs is None and prep.workspace.combine is None  # made by the first launch that pushes
    table = prep.workspace.combine_slot_table()
    combine = prep.workspace.combine
    assert combine.shape == (4, per_rank * 2, 128) and bool(combine.isnan().all())
    assert table.tolist() == [combine[r].data_ptr() for r in range(4)]
    assert prep.workspace.combine_slot_table() is table
    assert prep.workspace.counters.numel() == workspace.counter_ints(4, prep.schedule.capacity, prep.minibatch_rows)
    assert not prep.fuse_top1


def test_top1_fuses_the_combine_and_needs_no_slots():
    from mok.cuda import backend
    problem = _cpu_problem(top_k=1)
    fused = backend.prepare(*problem)
    assert fused.fuse_top1 and fused.workspace.combine is None
    assert fused.combine_ptrs.tolist() == fused.out_ptrs.tolist()
    with pytest.raises(ValueError, match="no workspace combine slots"):
        fused.workspace.combine_slot_table()
    unfused = backend.prepare(*problem, fuse_top1=False)
    assert not unfused.fuse_top1 and unfused.workspace.combine_slot_table().numel() == 1
    with pytest.raises(ValueError, match="top_k == 1"):
        backend.prepare(*_cpu_problem(top_k=2), fuse_top1=True)


# ------------------------------------------------------------------------------------------------------
# The device schedule-table logic (include/mok/schedule_tables.cuh), replayed on the host
# ------------------------------------------------------------------------------------------------------

TABLES_SOURCE = r"""
#include <cstdio>
#include <vector>
#include "mok/schedule_tables.cuh"
using namespace mok::sm90;
int main() {
  int n, experts, ranks, tile, capacity, slots_per_rank;
  if (scanf("%d %d %d %d %d %d", &n, &experts, &ranks, &tile, &capacity, &slots_per_rank) != 6) return 2;
  std::vector<int> expert_sorted(n);
  std::vector<long long> slot_read(n);
  std::vector<int64_t> slot_sorted(n);
  for (int i = 0; i < n; ++i) if (scanf("%d", &expert_sorted[i]) != 1) return 2;
  for (int i = 0; i < n; ++i) { if (scanf("%lld", &slot_read[i]) != 1) return 2; slot_sorted[i] = slot_read[i]; }
  std::vector<int> run_start(experts + 1);
  for (int e = 0; e <= experts; ++e) run_start[e] = lower_bound_i32(expert_sorted.data(), n, e);
  const int local = experts / ranks;
  std::vector<int> offsets(ranks * (local + 1));
  for (int r = 0; r < ranks; ++r) rank_segment_offsets(run_start.data(), r, local, tile, &offsets[r * (local + 1)]);
  for (int v : offsets) printf("%d ", v);
  printf("\n");
  std::vector<int> tile_expert;
  for (int r = 0; r < ranks; ++r) {
    for (int row = 0; row < capacity; ++row) {
      const ScheduleRow s = schedule_row(run_start.data(), slot_sorted.data(), &offsets[r * (local + 1)], r, local,
                                         row, slots_per_rank);
      printf("%d %d ", s.src_rank, s.src_slot);
      if (row % tile == 0) tile_expert.push_back(s.tile_expert);
    }
  }
  printf("\n");
  for (int v : tile_expert) printf("%d ", v);
  printf("\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def tables_replay(tmp_path_factory):
    return compile_host_program(TABLES_SOURCE, tmp_path_factory.mktemp("tables"), "tables")


@needs_nvcc
@pytest.mark.parametrize("seed", [*range(24), *range(100, 108)])
def test_device_schedule_logic_equals_build_schedule(tables_replay, seed):
    from mok.schedule import worst_case_capacity
    ids, experts, ranks = _random_routing(seed)
    tokens, top_k = ids.shape
    capacity = worst_case_capacity(tokens, experts, top_k, ranks, 128)
    expert_sorted, slot_sorted = torch.sort(ids.reshape(-1).to(torch.int32), stable=True)
    head = f"{ids.numel()} {experts} {ranks} 128 {capacity} {tokens // ranks * top_k}\n"
    text = head + " ".join(map(str, expert_sorted.tolist())) + "\n" + " ".join(map(str, slot_sorted.tolist())) + "\n"
    run = subprocess.run([str(tables_replay)], input=text, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    offsets, rows, tiles = (torch.tensor([int(v) for v in line.split()], dtype=torch.int32)
                            for line in run.stdout.splitlines())
    full = mok.build_schedule(ids, experts, ranks, tile=128)
    assert torch.equal(offsets.view(ranks, -1), full.segment_offsets)
    assert torch.equal(rows.view(ranks, capacity, 2)[..., 0], full.src_rank)
    assert torch.equal(rows.view(ranks, capacity, 2)[..., 1], full.src_slot)
    assert torch.equal(tiles.view(ranks, -1), full.tile_expert)


@needs_nvcc
def test_schedule_table_kernels_compile_for_sm90a(tmp_path):
    proc = build.compile_object(tmp_path / "schedule_tables.o", verbose=True, source=build.SCHEDULE_SOURCE)
    assert proc.returncode == 0, proc.stderr
    assert "spill stores" in proc.stderr and not re.search(r"[1-9]\d* bytes spill", proc.stderr), proc.stderr


def test_binding_compiles_against_the_torch_headers(tmp_path):
    """csrc/binding.cpp (the torch extension's host code) type-checks with g++ against the installed torch's
    headers, on a CPU machine too: the JIT build on the GPU is the only other place it is compiled."""
    gxx = shutil.which("g++")
    torch_include = Path(torch.__file__).parent / "include"
    if gxx is None or not (torch_include / "torch" / "extension.h").exists():
        pytest.skip("g++ or the torch C++ headers are not installed")
    homes = [Path(NVCC).resolve().parent.parent] if NVCC else []
    homes += [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))]
    cuda_include = next((h / "include" for h in homes if (h / "include" / "cuda_runtime_api.h").exists()), None)
    if cuda_include is None:
        pytest.skip("the CUDA runtime headers are not installed")
    # A CPU wheel of torch lacks this generated header of its CUDA build; its macros are not needed to type-check.
    stub = tmp_path / "stub" / "c10" / "cuda" / "impl"
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
    includes = [tmp_path / "stub", torch_include, torch_include / "torch" / "csrc" / "api" / "include",
                Path(sysconfig.get_paths()["include"]), cuda_include, build.INCLUDE_DIR]
    proc = subprocess.run([gxx, "-std=c++17", "-fsyntax-only", *(f"-I{p}" for p in includes),
                           str(build.BINDING_SOURCE)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
