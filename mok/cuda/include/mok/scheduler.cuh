// The static task order and its dependencies (host- and device-callable, so a CPU test can replay it).
//
// Hopper has no Cluster Launch Control, so work is handed out by one atomic ticket counter: a CTA takes
// ticket t, decodes it into a task with this file's order, waits for the task's dependencies, runs it and
// bumps the counters it signals. The order is fixed before the launch (it depends only on how many tiles
// each rank's schedule uses), and every dependency of a task is signalled only by tasks with smaller
// tickets. Tickets are taken in increasing order by running CTAs, so the smallest unfinished ticket always
// belongs to a running CTA whose dependencies are all finished: the kernel cannot deadlock, whatever number
// of CTAs is resident and in whatever order they start.
//
// The order. Ranks' schedules are walked in minibatches of `tiles_per_minibatch` tiles ("steps"); within a
// step the groups are, for each rank in turn:
//
//     step 0 only:  D(0)      dispatch tiles of minibatch 0, each in `first_dispatch_parts` tasks of rows
//     every step:   G(s)      gate/up tiles of minibatch s (in bands of 4 tiles, column-major within a band:
//                             gate_up_band_entry)
//                   D(s+1)    dispatch tiles of the next minibatch (prefetch: overlaps the down GEMMs)
//                   W(s)      down tiles of minibatch s (tile-major, then column span: down_span column blocks
//                             per task, so down_nblocks here counts tasks per tile)
//                   C(s)      early combine only: the combine blocks placed in step s (below)
//     after all steps: C      without early combine: combine blocks, per source rank, kCombineTokens tokens each
//
// D(0) in parts (round 22): nothing else can start before minibatch 0's rows are in the ring, and with one task per
// tile only as many CTAs as the minibatch has tiles copy them while the others wait (the qwen slice: 33 of 132 CTAs,
// 48 us, 4.4% of the launch). Splitting each of its tiles into `first_dispatch_parts` tasks of 128 / parts rows spreads
// the copy over (up to) every CTA. A part is task nblock = part; G(0, m) waits for all parts of tile m (its counter
// reaches `first_dispatch_parts`). Later dispatches D(s+1) run beside GEMMs and stay one task per tile.
//
// Overlapped steps (`overlap_steps`, round 18): G(s) and W(s - 1) share one group, tile by tile (the gnb gate/up
// tasks of tile q of minibatch s, then the down tasks of tile q of minibatch s - 1), and one more step at the end
// holds W of the last minibatch:
//
//     step s:       D(0) (s = 0), GW(s) = G(s, 0) W(s-1, 0) G(s, 1) W(s-1, 1) ..., D(s+1)
//
// In the plain order every CTA runs the step's gate/up tasks and then its down tasks, at the same time as the others
// (the first 12 CTAs of round 18's anchor-2 timeline), so their pushes meet at the HBM's write rate
// (experiments/push_store_probe.cu: 2.1 us per tile with all 132 SMs pushing, 1.2 us with half of them). Mixed, the pushes of some CTAs run beside the mainloops of
// the others. Every dependency still points backwards: W(s - 1, q) waits for G(s - 1, q), a group earlier; G(s)
// waits for W(s - ring_slots) (ring h free), which needs ring_slots >= 2 (the host refuses 1); dispatch is unchanged.
// Not with early combine, whose blocks follow W(s) in step s.
// Measured (round 18, mok/cuda/ROUNDS.md): 0.4-1.2% faster in gather mode (anchors 1-2), 4-19% slower in ring
// mode (anchors 3 and 5, the slices), where a step's gate/up weights and the previous step's down weights no longer
// share L2; so it is off by default (MOK_CUDA_OVERLAP_STEPS).
//
// Spread dispatch (`spread_dispatch`, round 44): D(s+1) shares G(s)'s group, one dispatch task every n / dt entries
// (decode_spread), so that the ring's copies for the next minibatch run beside this step's gate/up GEMMs instead of
// all at once between G(s) and W(s):
//
//     step s:       D(0) (s = 0), GD(s) = G G G D(s+1, 0) G G G D(s+1, 1) ..., W(s)
//
// In 2-CTA clusters the lock-stepped pairs keep the chip in step, and every CTA reached D(s+1) at once (round 43: its
// tasks 11% longer than without clusters). D(s+1) waits for G(s + 1 - ring_slots), a group before GD(s) when the ring
// holds 2 or more minibatches (the host refuses 1, unless the ring holds the whole schedule); not with overlap_steps.
// Measured (round 44, mok/cuda/ROUNDS.md): the dispatch tasks do get shorter (anchor-3: 39.1 us in clusters + spread,
// 46.8 in clusters alone), but copies among a band's tasks push its weights out of L2 (anchor-5: 21.4 GB of DRAM
// reads against 19.7), and held at the power limit the clock pays: 1.013-1.019x the time alone, 0.999-1.010x in
// clusters. So it is off by default (MOK_CUDA_SPREAD_DISPATCH).
//
// Early combine (`combine_offsets` set; mok/cuda/schedule_tables.py, combine_order). A token's weighted sum needs
// its K rows, which lie in up to K experts' segments, so without more information it must wait for the last down
// task of its source rank: the whole sum (T x K x H values read) became a memory-bound tail after the last GEMM
// (3-6% of the kernel at anchors 3-5 on the H200). But a token is *ready* after the step of the last of its rows,
// and for most tokens that step is not the last one. The host sorts every rank's tokens by ready step and cuts
// the order into blocks of kCombineTokens; a block is ready when its last token is, and a block ready after
// step m runs in step m + 1 (the last step: ready after it or the one before), after that step's down tiles,
// while later GEMMs still run. A whole step's tasks lie between W(m) and the block, so its wait has usually been
// met when it is claimed. Only the tokens ready in the last two steps remain a tail.
// Measured (round 11, mok/cuda/ROUNDS.md): correct and bit-identical, but 0.5-2.3% slower than the tail on
// anchors 1-5 in a balanced A/B, so it is off by default (MOK_CUDA_EARLY_COMBINE).
//
// One real rank per launch (`local_rank` >= 0, expert parallelism across GPUs): the other ranks' groups are empty
// (their used tiles count as 0) and C holds only this rank's own combine blocks (`combine_rank`); the expert
// launch has no C at all and the combine launch nothing but C (sm90_moe_forward.cuh).
//
// Gather mode (`gather_x`; mok/cuda/backend.py picks it per shape): the gate/up producer gathers its A rows straight from
// the token buffers (gemm_mainloop.cuh, gather_a_rows), so there are no D groups, no ring x, and G waits
// only for the ring h rows it overwrites.
//
// Dependencies (all point backwards in that order):
//     D(i)       waits until every G(i - ring_slots) task finished  (ring x rows are free again)
//     G(i, m)    waits until D(tile m) finished (all its parts in     (its A rows are in the ring; not
//                step 0)                                              in gather mode)
//                and every W(i - ring_slots) task finished           (ring h rows are free again)
//     W(i, m)    waits until every G(tile m, *) finished             (all of h for the tile is written)
//     C(s, b)    waits until every row of source s was pushed        (T_local * K rows x down column blocks;
//                                                                     a combine-only launch waits for nothing:
//                                                                     the barrier before it did)
//     C(s, b) early combine, placed in step s: m = s - 1 (the last step: m = s)
//                waits until every W(0..m) task of every rank finished (one counter per step; the consumers wait,
//                                                                     not the claim: wait_combine_ready in
//                                                                     combine.cuh, each step checked once per CTA)
#pragma once

#include "workspace.cuh"

namespace mok::sm90 {

// G(s) is walked in bands of kGateUpBandTiles row tiles, column-major within a band (gate_up_band_entry). A power of
// two, so the division by it is a shift.
constexpr unsigned kGateUpBandTiles = 4;

// Entry j of a step's G group of `count` = tiles x gnb tasks: which row tile (0-based in the step) and which gate/up
// column block. Tile-major order (every column block of tile 0, then of tile 1, ...) puts gnb tickets between the
// tasks that read the same weight column block, and with H 7168 an expert's W1 (59-88 MB) no longer stays in L2
// between them. So full bands of kGateUpBandTiles row tiles run column-major: a column block's tasks are claimed
// back to back, so their CTAs walk K nearly together and the block can come from DRAM once per band (the DRAM bytes
// with bands were not measured yet). The step's last band, if it has fewer tiles, stays tile-major. Measured (round 36, A/B of the kernel alone, bitwise equal):
// 0.97-0.98x the time at anchor-5 and the deepseek slice, 0.99-1.015x elsewhere; bands of 8: 0.98-0.99x there, 1.03x
// at anchor-4. One runtime division, as before: the producer thread's registers are few (decode_overlapped).
// With clusters (`pairs`) the last band's first two tiles, if it has two, run column-major too (a band of 2), so that
// every pair of tickets (2i, 2i + 1) of a band is two row tiles of one column block: what a cluster's two CTAs run
// with one load of the weight tile (cluster_pairs.cuh).
__host__ __device__ inline void gate_up_band_entry(unsigned j, unsigned gnb, unsigned count, unsigned& tile,
                                                   unsigned& column, bool pairs = false) {
  tile = j / gnb;  // tile-major
  column = j - tile * gnb;
  const unsigned band_first = tile / kGateUpBandTiles * kGateUpBandTiles;  // the band's first tile
  if ((band_first + kGateUpBandTiles) * gnb <= count) {                   // a full band: column-major
    const unsigned within = j - band_first * gnb;
    column = within / kGateUpBandTiles;
    tile = band_first + within % kGateUpBandTiles;
  } else if (pairs && (band_first + 2) * gnb <= count && tile < band_first + 2) {  // clusters: a band of 2
    const unsigned within = j - band_first * gnb;
    column = within / 2;
    tile = band_first + within % 2;
  }
}

enum TaskPhase : int {
  kPhaseDispatchFirst = 0,
  kPhaseGateUp = 1,
  kPhaseDispatchNext = 2,
  kPhaseDown = 3,
  kPhaseEarlyCombine = 4,  // early combine only
  kNumPhases = 5,
};

// What decoding needs to know about the launch (a copy lives in each CTA's registers/shared memory).
struct ScheduleView {
  int num_ranks;
  int tiles_per_rank;       // schedule capacity / BLOCK_M
  int tiles_per_minibatch;
  int ring_slots;
  int max_minibatches;
  int gate_up_nblocks;
  int down_nblocks;         // down tasks per tile: ceil(H / kBlockN) / down_span
  int combine_blocks;       // per source rank
  int num_steps;            // max over ranks of ceil(rank_tiles / tiles_per_minibatch) (+ 1: overlap_steps)
  const int* rank_tiles;    // [num_ranks] used tiles of each rank's table
  int gather_x;             // 1: no dispatch tasks; gate/up gathers its A rows itself (last but one, so
                            //    that aggregate initialisers without it mean the ring mode)
  int combine_rank = -1;    // -1: combine blocks for every source rank; r: rank r's only (one real rank per
                            //    launch, whose other ranks' tiles are 0 in rank_tiles)
  // Early combine: [R, max_minibatches + 1], the first combine block of each rank placed in each step
  // (Sm90MoeParams::combine_offsets); nullptr: every combine block after the last step.
  const int* combine_offsets = nullptr;
  int overlap_steps = 0;    // 1: G(s) and W(s - 1) in one group (above); needs ring_slots >= 2, no early combine.
                            //    num_steps then counts one step more than the minibatches: the last one's W
  // Combine tasks after the last step: (combine_rank >= 0 ? 1 : num_ranks) * combine_blocks (0 with early combine).
  // NOTE: a field, not a method: the kernel reads it from the launch parameters (Sm90MoeParams::combine_tasks),
  // where the product computed in the producer's task loop was hoisted into one more register than the producer
  // has (ptxas spilled it once the overlapped-steps decode came in).
  int combine_tasks = 0;
  // D(0)'s dispatch tasks per tile (1 = one per tile; at most Sm90Tiles::kMaxFirstDispatchParts).
  int first_dispatch_parts = 1;
  // Clusters (cluster_pairs.cuh): 1 pads every group to an even number of tickets (kTaskIdle at its end), so that
  // the tickets a cluster claims two at a time, (2i, 2i + 1), never straddle two groups, and walks the last partial
  // band of a G group in a band of 2 where it can (gate_up_band_entry). Needs overlap_steps off.
  int pair_units = 0;
  // Spread dispatch: 1 places D(s + 1)'s tasks among G(s)'s, evenly, in one group GD(s) (decode_spread), instead of in
  // a group of their own after G(s). Ring mode; needs ring_slots >= 2 (or the whole schedule) and overlap_steps off.
  int spread_dispatch = 0;

  // Dispatch tasks of a tile of minibatch `minibatch`: D(0) in parts, every later one whole.
  __host__ __device__ int dispatch_parts(int minibatch) const { return minibatch == 0 ? first_dispatch_parts : 1; }

  __host__ __device__ bool early_combine() const { return combine_offsets != nullptr; }

  __host__ __device__ int first_combine_block(int rank, int step) const {
    return combine_offsets[rank * (max_minibatches + 1) + step];
  }

  // Early combine: the step after which the blocks placed in step `placed` are ready (the step before; in the
  // last step, the last step itself).
  __host__ __device__ int combine_ready_step(int placed) const { return placed == num_steps - 1 ? placed : placed - 1; }

  // Down tasks of step `step`, all ranks together (what the step's counter reaches).
  __host__ __device__ int down_step_tasks(int step) const {
    int tiles = 0;
    for (int r = 0; r < num_ranks; ++r) tiles += tiles_in_minibatch(r, step);
    return tiles * down_nblocks;
  }

  __host__ __device__ int tiles_in_minibatch(int rank, int minibatch) const {
    const int left = rank_tiles[rank] - minibatch * tiles_per_minibatch;
    return left <= 0 ? 0 : (left < tiles_per_minibatch ? left : tiles_per_minibatch);
  }

  __host__ __device__ int group_size(int step, int phase, int rank) const {
    switch (phase) {
      case kPhaseDispatchFirst: return step == 0 && !gather_x ? tiles_in_minibatch(rank, 0) * first_dispatch_parts : 0;
      case kPhaseGateUp: {
        const int gate_up = tiles_in_minibatch(rank, step) * gate_up_nblocks +
                            (overlap_steps && step > 0 ? tiles_in_minibatch(rank, step - 1) * down_nblocks : 0);
        if (!spread_dispatch) return gate_up;
        const int dispatch = tiles_in_minibatch(rank, step + 1);
        return pair_units ? ((gate_up + 1) & ~1) + ((dispatch + 1) & ~1) : gate_up + dispatch;
      }
      case kPhaseDispatchNext: return gather_x || spread_dispatch ? 0 : tiles_in_minibatch(rank, step + 1);
      case kPhaseDown: return overlap_steps ? 0 : tiles_in_minibatch(rank, step) * down_nblocks;
      default:  // kPhaseEarlyCombine
        return early_combine() ? first_combine_block(rank, step + 1) - first_combine_block(rank, step) : 0;
    }
  }
};

// Walks the order forward. Tickets passed to decode() must not decrease (each CTA's own tickets grow), so
// decoding is amortised O(1) per ticket.
struct TaskCursor {
  int step = 0;
  int phase = 0;
  int rank = 0;
  int base = 0;   // first ticket of the current (step, phase, rank) group
  int count = 0;  // tickets in that group

  __host__ __device__ void start(const ScheduleView& v) {
    step = phase = rank = base = 0;
    count = v.num_steps > 0 ? v.group_size(0, 0, 0) : 0;
  }

  // Tickets of the current group: its tasks, and with clusters one kTaskIdle more if they are odd.
  __host__ __device__ int span(const ScheduleView& v) const { return v.pair_units ? (count + 1) & ~1 : count; }

  __host__ __device__ void advance(const ScheduleView& v) {
    base += span(v);
    if (++rank == v.num_ranks) {
      rank = 0;
      if (++phase == kNumPhases) {
        phase = 0;
        ++step;
      }
    }
    count = step < v.num_steps ? v.group_size(step, phase, rank) : 0;
  }

  // Entry j of group GW(step) of rank `rank` (overlapped steps): tile q's gate/up tasks of minibatch `step`, then
  // tile q's down tasks of minibatch `step - 1`, for every tile q of minibatch `step`; then the down tasks of the
  // tiles minibatch `step - 1` has beyond those. A rank's minibatches are full but the last, so minibatch `step`
  // never has more tiles than `step - 1` (the extra last step has no gate/up tasks). Step 0, which has no down
  // tasks, decodes as the plain order's G(0).
  __host__ __device__ void decode_overlapped(const ScheduleView& v, int j, Task& t) const {
    // Unsigned: every value here is non-negative, and unsigned division by a runtime divisor is the shorter
    // sequence (the producer thread has 56 registers; this decode fits them, see combine_tasks above).
    const unsigned gate_up_tiles = static_cast<unsigned>(v.tiles_in_minibatch(rank, step));
    const unsigned gnb = static_cast<unsigned>(v.gate_up_nblocks), dnb = static_cast<unsigned>(v.down_nblocks);
    const unsigned paired = gate_up_tiles * (gnb + dnb);  // one tile of each, gate_up_tiles times
    const unsigned u = static_cast<unsigned>(j);
    unsigned q, r;
    if (u < paired) {
      q = u / (gnb + dnb);
      r = u - q * (gnb + dnb);
    } else {
      q = gate_up_tiles + (u - paired) / dnb;
      r = gnb + (u - paired) % dnb;
    }
    const bool gate_up = r < gnb;
    t.kind = gate_up ? kTaskGateUp : kTaskDown;
    t.minibatch = gate_up ? step : step - 1;
    t.tile = t.minibatch * v.tiles_per_minibatch + static_cast<int>(q);
    t.nblock = static_cast<int>(gate_up ? r : r - gnb);
  }

  // Entry j of group GD(step) of rank `rank` (spread dispatch): the gt gate/up tasks of G(step) and the dt dispatch
  // tasks of D(step + 1), merged evenly. Entry j of the n = gt + dt is a dispatch iff floor((j + 1) dt / n) >
  // floor(j dt / n): the group is cut into dt runs of about n / dt entries, each ending in one dispatch. The dispatch's
  // index is floor(j dt / n) (those before it); a gate/up entry's index in G is j - floor((j + 1) dt / n), and it
  // decodes as the plain G group's entry of that index (gate_up_band_entry). With clusters the merge goes in units of
  // two tickets, each part padded to an even count (kTaskIdle), so that a unit is two gate/up tasks of a band or two
  // dispatches, never one of each. Every dependency still points backwards: D(step + 1) waits for G(step + 1 -
  // ring_slots), a group before this one when the ring holds 2 or more minibatches (the launch checks).
  __host__ __device__ void decode_spread(const ScheduleView& v, int j, Task& t) const {
    const unsigned gnb = static_cast<unsigned>(v.gate_up_nblocks);
    const unsigned gate_up = static_cast<unsigned>(v.tiles_in_minibatch(rank, step)) * gnb;
    const unsigned dispatch = static_cast<unsigned>(v.tiles_in_minibatch(rank, step + 1));
    const unsigned shift = v.pair_units ? 1u : 0u;  // log2 of the unit's tickets
    const unsigned half = static_cast<unsigned>(j) & shift;  // the ticket's place in its unit (0 without clusters)
    const unsigned gate_up_units = (gate_up + shift) >> shift, dispatch_units = (dispatch + shift) >> shift;
    const unsigned units = gate_up_units + dispatch_units;
    const unsigned u = static_cast<unsigned>(j) >> shift;
    const unsigned dispatches_before = u * dispatch_units / units, dispatches_through = (u + 1) * dispatch_units / units;
    if (dispatches_through > dispatches_before) {
      const unsigned index = (dispatches_before << shift) + half;
      t.kind = index < dispatch ? kTaskDispatch : kTaskIdle;  // (idle: the padding of an odd dispatch count)
      t.minibatch = step + 1;
      t.tile = (step + 1) * v.tiles_per_minibatch + static_cast<int>(index);
    } else {
      const unsigned index = ((u - dispatches_through) << shift) + half;
      t.kind = index < gate_up ? kTaskGateUp : kTaskIdle;
      t.minibatch = step;
      unsigned tile, column;
      gate_up_band_entry(index, gnb, gate_up, tile, column, v.pair_units != 0);
      t.tile = step * v.tiles_per_minibatch + static_cast<int>(tile);
      t.nblock = static_cast<int>(column);
    }
  }

  __host__ __device__ Task decode(const ScheduleView& v, int ticket) {
    while (step < v.num_steps && ticket >= base + span(v)) advance(v);
    Task t{};
    t.ticket = ticket;
    t.expert = -1;
    t.nblock = 0;
    const int j = ticket - base;
    if (step < v.num_steps && j >= count) {  // clusters: the group's padding ticket
      t.kind = kTaskIdle;
    } else if (step < v.num_steps) {
      t.rank = rank;
      switch (phase) {
        case kPhaseDispatchFirst:  // step 0: tile j / parts, rows part j % parts of it (t.nblock)
          t.kind = kTaskDispatch;
          t.minibatch = step;
          t.tile = j / v.first_dispatch_parts;
          t.nblock = j % v.first_dispatch_parts;
          break;
        case kPhaseGateUp:
          if (v.overlap_steps && step > 0) {
            decode_overlapped(v, j, t);
            break;
          }
          if (v.spread_dispatch) {
            decode_spread(v, j, t);
            break;
          }
          t.kind = kTaskGateUp;
          t.minibatch = step;
          {
            unsigned tile, column;
            gate_up_band_entry(static_cast<unsigned>(j), static_cast<unsigned>(v.gate_up_nblocks),
                               static_cast<unsigned>(count), tile, column, v.pair_units != 0);
            t.tile = step * v.tiles_per_minibatch + static_cast<int>(tile);
            t.nblock = static_cast<int>(column);
          }
          break;
        case kPhaseDispatchNext:
          t.kind = kTaskDispatch;
          t.minibatch = step + 1;
          t.tile = (step + 1) * v.tiles_per_minibatch + j;
          break;
        case kPhaseDown:
          t.kind = kTaskDown;
          t.minibatch = step;
          t.tile = step * v.tiles_per_minibatch + j / v.down_nblocks;
          t.nblock = j % v.down_nblocks;
          break;
        default:  // kPhaseEarlyCombine
          t.kind = kTaskCombine;
          t.minibatch = step;  // where it was placed (NOTE: not the ready step: the producer has no register to spare)
          t.tile = (v.first_combine_block(rank, step) + j) * Sm90Tiles::kCombineTokens;
          break;
      }
    } else if (!v.early_combine() && j < v.combine_tasks) {
      t.kind = kTaskCombine;
      t.rank = v.combine_rank >= 0 ? v.combine_rank : j / v.combine_blocks;
      t.tile = j % v.combine_blocks * Sm90Tiles::kCombineTokens;
      t.minibatch = -1;
    } else {
      t.kind = kTaskStop;
    }
    return t;
  }
};

// One wait: counters[offset] >= expected.
struct Dependency {
  int counter_id;  // CounterId, for the error record
  int offset;      // into the counter block
  int rank;
  int index;       // tile or minibatch
  int expected;
};

// One signal: counters[offset] += 1 (the per-source push counts are added separately, see combine.cuh).
struct Signal {
  int offset;
};

// Early combine: every rank's down tasks of step `step` finished.
__host__ __device__ inline Dependency down_step_dependency(const ScheduleView& v, const CounterLayout& ctr, int rank,
                                                           int step) {
  return {kCtrDownStepDone, ctr.down_step_done + step, rank, step, v.down_step_tasks(step)};
}

// The dependencies of a task; returns how many (at most 2) were written to `deps`.
__host__ __device__ inline int task_dependencies(const ScheduleView& v, const CounterLayout& ctr, const Task& t,
                                                 int pushed_expected, Dependency (&deps)[2]) {
  int n = 0;
  const int prev = t.minibatch - v.ring_slots;  // the minibatch whose ring slot this one reuses
  switch (t.kind) {
    case kTaskDispatch:
      if (prev >= 0) {
        deps[n++] = {kCtrGateUpMbDone, ctr.gate_up_mb_done + t.rank * v.max_minibatches + prev, t.rank, prev,
                     v.tiles_in_minibatch(t.rank, prev) * v.gate_up_nblocks};
      }
      break;
    case kTaskGateUp: {
      // NOTE: constant indices only (a runtime index would put `deps` in local memory on the device).
      const Dependency rows_in_ring = {kCtrDispatchDone, ctr.dispatch_done + t.rank * v.tiles_per_rank + t.tile,
                                       t.rank, t.tile, v.dispatch_parts(t.minibatch)};
      const Dependency ring_h_free = {kCtrDownMbDone, ctr.down_mb_done + t.rank * v.max_minibatches + prev, t.rank,
                                      prev, prev >= 0 ? v.tiles_in_minibatch(t.rank, prev) * v.down_nblocks : 0};
      if (v.gather_x) {  // the A rows come straight from the token buffers: no dispatch to wait for
        deps[0] = ring_h_free;
        n = prev >= 0 ? 1 : 0;
      } else {
        deps[0] = rows_in_ring;
        deps[1] = ring_h_free;
        n = prev >= 0 ? 2 : 1;
      }
      break;
    }
    case kTaskDown:
      deps[n++] = {kCtrGateUpTileDone, ctr.gate_up_tile_done + t.rank * v.tiles_per_rank + t.tile, t.rank, t.tile,
                   v.gate_up_nblocks};
      break;
    case kTaskCombine:
      if (t.minibatch >= 0) {  // early combine: W(m) of every rank, and of every step before (wait_combine_ready)
        deps[n++] = down_step_dependency(v, ctr, t.rank, v.combine_ready_step(t.minibatch));
      } else {
        deps[n++] = {kCtrPushed, ctr.pushed + t.rank, t.rank, t.tile, pushed_expected};
      }
      break;
    default:
      break;
  }
  return n;
}

// The counters a finished task bumps by one; returns how many (at most 2).
__host__ __device__ inline int task_signals(const ScheduleView& v, const CounterLayout& ctr, const Task& t,
                                            Signal (&signals)[2]) {
  switch (t.kind) {
    case kTaskDispatch:
      signals[0] = {ctr.dispatch_done + t.rank * v.tiles_per_rank + t.tile};
      return 1;
    case kTaskGateUp:
      signals[0] = {ctr.gate_up_tile_done + t.rank * v.tiles_per_rank + t.tile};
      signals[1] = {ctr.gate_up_mb_done + t.rank * v.max_minibatches + t.minibatch};
      return 2;
    case kTaskDown:
      signals[0] = {ctr.down_mb_done + t.rank * v.max_minibatches + t.minibatch};
      if (!v.early_combine()) return 1;
      signals[1] = {ctr.down_step_done + t.minibatch};
      return 2;
    default:
      return 0;
  }
}

// Ring row (within the rank's ring) of a schedule tile's first row.
__host__ __device__ inline int ring_row_of_tile(const ScheduleView& v, int tile, int block_m) {
  const int minibatch = tile / v.tiles_per_minibatch;
  return ((minibatch % v.ring_slots) * v.tiles_per_minibatch + tile % v.tiles_per_minibatch) * block_m;
}

// Row of task t's tile's first row in the launch's ring buffers (ring_x, ring_h): its rank's ring, then its tile.
__device__ __forceinline__ long long task_ring_row0(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                                    int block_m) {
  return static_cast<long long>(own_slot(p, t.rank)) * p.ring_rows + ring_row_of_tile(v, t.tile, block_m);
}

}  // namespace mok::sm90
