// Torch binding of the SM90 MoE forward: checks tensors, fills Sm90MoeProblem, launches on the current
// stream. All allocation and schedule building happens in Python (mok/cuda/backend.py); this file only
// validates what the kernel will assume and forwards raw pointers.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/extension.h>

#include <string>
#include <vector>

#include "mok/launch.cuh"

namespace {

// Numbers and shapes in the error messages are formatted here and passed as strings, never streamed into TORCH_CHECK's
// message: on the H200 machine (torch 2.11 and its image's g++, round 23) an integer streamed there crashed the process
// (SIGSEGV in the extension's own copy of ostream::_M_insert<long>, at a locale facet), where strings pass. So a bad
// input gets its RuntimeError instead of taking the interpreter down.
std::string num(int64_t value) { return std::to_string(value); }

std::string dims(at::IntArrayRef sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(sizes[i]);
  return text + "]";
}

void check_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype, const at::Device& device) {
  TORCH_CHECK(t.defined(), name, " is undefined");
  TORCH_CHECK(t.device() == device, name, " must be on ", device.str(), ", got ", t.device().str());
  TORCH_CHECK(t.scalar_type() == dtype, name, " must have dtype ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

void check_shape(const at::Tensor& t, const char* name, std::initializer_list<int64_t> shape) {
  TORCH_CHECK(t.sizes().equals(shape), name, " must have shape ", dims(at::IntArrayRef(shape)), ", got ",
              dims(t.sizes()));
}

// Launch the forward. Shapes (R ranks, C = capacity rows per rank, E experts, H hidden, I intermediate):
//   src_rank, src_slot [R, C] int32; tile_expert [R, C/128] int32; segment_offsets [R, E/R + 1] int32
//   x_ptrs, weight_ptrs, combine_ptrs, out_ptrs [R] int64 (peer pointer tables)
//   w_gate, w_up [E, I, H] bf16; w_down [E, H, I] bf16
//   ring_x [R * ring_rows, H] bf16; ring_h [R * ring_rows, I] bf16
//   counters [counter_ints(R, C, minibatch_rows)] int32; error [error_words()] int32
//   fuse_top1: top_k == 1 only; the down epilogue writes the output (combine_ptrs is then never read)
//   ablate: AblateFlags bitmask (timing experiments; 0 for real results)
//   gather_x: gate/up gathers its A rows from the token buffers (no dispatch tasks, ring_x unused)
//   gather_prefetch: gather mode, K blocks ahead to prefetch token rows into L2 (0 = none)
//   gather_row_prefetch: gather mode, one bulk L2 prefetch per whole token row at each gate/up tile's start
//   saved_gate_up: [R * capacity, 2I] bf16 to receive gate | up of every schedule row (training), or an empty
//     tensor for none
//   mxfp8, x_row_bytes: x_ptrs hold packed MXFP8 rows of x_row_bytes bytes (ring dispatch dequantizes them, h is
//     rounded through MXFP8); x_row_bytes 0 means bf16 rows (2H)
//   signal_warp: pipelined variant, ring mode: an idle producer warp signals finished tasks (the consumers
//     never wait for the gpu-scope fence)
//   store_warps: with the signal warp, two idle producer warps store the down tiles' staged rows and (bf16) the
//     gate/up tiles' h rows
//   local_rank, phases: -1, 3 for emulated ranks; r >= 0 for one real rank per GPU (launch.cuh): then w_* are
//     that rank's experts ([E_local, ...], segment_offsets [R, E_local + 1]), ring_x/ring_h are [ring_rows, ...]
//     and saved_gate_up is [C, 2I]; phases 1 runs its expert tasks, 2 the combine of its own tokens
//   combine_tokens [R, T_local], combine_offsets [R, ceil(C / minibatch_rows) + 1] int32: early combine (each rank's
//     tokens by ready step; mok/cuda/schedule_tables.py, combine_order), or two empty tensors for none
//   skip_padding_half: a GEMM tile whose rows 64..127 are all padding runs one consumer warpgroup's MMA
//   trace: int64 [N, kSm90TraceFields] to receive the task timeline of tickets 0..N-1 (include/mok/trace.cuh), or an
//     empty tensor
//   down_span: column blocks per down task (divides ceil(H / 256); > 1 needs store_warps off)
//   overlap_steps: each step's gate/up tasks share a group of the task order with the previous step's down tasks
//   y [R * capacity, H] bf16 and y_rows [R, T_local * K] int32: down_tma (the down tiles leave by TMA into y in
//     schedule order, the down tasks write the inverse map y_rows and the weighted sum reads y through it), or two
//     empty tensors for the push into the slots
//   down_ping_pong: the consumer warpgroups take turns on each down block's column halves, one multiplying while the
//     other runs its epilogue; needs down_tma, the pipelined variant without the signal warp and I <= 256
//   first_dispatch_parts: tasks per tile of the first minibatch's dispatch (1..8), or 0 for enough to give every CTA
//     one (scheduler.cuh, D(0) in parts); changes no bit
//   sum_kernel: the weighted sum runs as a second kernel after the megakernel (include/mok/weighted_sum.cuh) instead of
//     as its combine tasks; emulated ranks with combine tasks, no early combine; changes no bit
//   clusters: 2-CTA clusters in which two gate/up row tiles of one expert load their weight tile once, half by each
//     CTA (include/mok/cluster_pairs.cuh); the pipelined variant in ring mode with the signal warp; changes no bit
//   spread_dispatch: each step's next dispatch tasks lie among its gate/up tasks in the task order (scheduler.cuh);
//     needs a ring of 2 or more minibatches and no overlap_steps; changes no bit
void forward(const at::Tensor& src_rank, const at::Tensor& src_slot, const at::Tensor& tile_expert,
             const at::Tensor& segment_offsets, const at::Tensor& x_ptrs, const at::Tensor& weight_ptrs,
             const at::Tensor& combine_ptrs, const at::Tensor& out_ptrs, const at::Tensor& w_gate,
             const at::Tensor& w_up, const at::Tensor& w_down, const at::Tensor& ring_x, const at::Tensor& ring_h,
             const at::Tensor& counters, const at::Tensor& error, int64_t tokens_per_rank, int64_t top_k,
             int64_t minibatch_rows, int64_t variant, int64_t num_ctas, double timeout_s, bool fuse_top1,
             int64_t ablate, bool gather_x, int64_t gather_prefetch, const at::Tensor& saved_gate_up,
             bool gather_row_prefetch, bool signal_warp, bool mxfp8, int64_t x_row_bytes, int64_t local_rank,
             int64_t phases, bool store_warps, const at::Tensor& combine_tokens,
             const at::Tensor& combine_offsets, bool skip_padding_half, const at::Tensor& trace,
             int64_t down_span, bool overlap_steps, const at::Tensor& y, const at::Tensor& y_rows,
             bool down_ping_pong, int64_t first_dispatch_parts, bool sum_kernel, bool clusters,
             bool spread_dispatch) {
  const at::Device device = w_gate.device();
  TORCH_CHECK(device.is_cuda(), "the SM90 MoE forward needs CUDA tensors");
  const c10::cuda::CUDAGuard guard(device);
  int major = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index()) == cudaSuccess,
              "could not query the compute capability of ", device.str());
  TORCH_CHECK(major == 9, "the SM90 MoE forward needs a Hopper GPU (compute capability 9.x), got major ", num(major));

  for (auto [t, name] : {std::pair{&src_rank, "src_rank"}, {&src_slot, "src_slot"}, {&tile_expert, "tile_expert"},
                         {&segment_offsets, "segment_offsets"}, {&counters, "counters"}, {&error, "error"}}) {
    check_tensor(*t, name, at::kInt, device);
  }
  for (auto [t, name] : {std::pair{&x_ptrs, "x_ptrs"}, {&weight_ptrs, "weight_ptrs"},
                         {&combine_ptrs, "combine_ptrs"}, {&out_ptrs, "out_ptrs"}}) {
    check_tensor(*t, name, at::kLong, device);
  }
  for (auto [t, name] : {std::pair{&w_gate, "w_gate"}, {&w_up, "w_up"}, {&w_down, "w_down"},
                         {&ring_x, "ring_x"}, {&ring_h, "ring_h"}}) {
    check_tensor(*t, name, at::kBFloat16, device);
  }

  TORCH_CHECK(src_rank.dim() == 2, "src_rank must be [R, capacity]");
  const int64_t R = src_rank.size(0), capacity = src_rank.size(1);
  TORCH_CHECK(w_gate.dim() == 3, "w_gate must be [E, I, H]");
  const int64_t E = w_gate.size(0), I = w_gate.size(1), H = w_gate.size(2);
  TORCH_CHECK(local_rank >= -1 && local_rank < R, "local_rank must be -1 or in [0, R=", num(R), "), got ",
              num(local_rank));
  const bool one_rank = local_rank >= 0;
  const int64_t own_ranks = one_rank ? 1 : R;  // ranks whose experts, ring and saved rows this launch holds
  TORCH_CHECK(R >= 1 && E % own_ranks == 0, "the expert count E=", num(E),
              " must be a multiple of the rank count R=", num(R));
  const int64_t local_experts = E / own_ranks;
  TORCH_CHECK(capacity % 128 == 0, "schedule capacity must be a multiple of 128 (the tile height), got ",
              num(capacity));
  check_shape(src_slot, "src_slot", {R, capacity});
  check_shape(tile_expert, "tile_expert", {R, capacity / 128});
  check_shape(segment_offsets, "segment_offsets", {R, local_experts + 1});
  for (auto [t, name] : {std::pair{&x_ptrs, "x_ptrs"}, {&weight_ptrs, "weight_ptrs"},
                         {&combine_ptrs, "combine_ptrs"}, {&out_ptrs, "out_ptrs"}}) {
    check_shape(*t, name, {R});
  }
  check_shape(w_up, "w_up", {E, I, H});
  check_shape(w_down, "w_down", {E, H, I});
  TORCH_CHECK(ring_x.dim() == 2 && ring_x.size(1) == H && ring_x.size(0) % own_ranks == 0,
              "ring_x must be [", num(own_ranks), " * ring_rows, H=", num(H), "], got ", dims(ring_x.sizes()));
  const int64_t ring_rows = ring_x.size(0) / own_ranks;
  check_shape(ring_h, "ring_h", {own_ranks * ring_rows, I});
  const int64_t needed = mok::sm90::sm90_moe_counter_ints(static_cast<int>(R), static_cast<int>(capacity),
                                                          static_cast<int>(minibatch_rows));
  TORCH_CHECK(counters.dim() == 1 && counters.numel() >= needed, "counters must hold ", num(needed), " int32");
  TORCH_CHECK(error.dim() == 1 && error.numel() >= mok::sm90::sm90_moe_error_words(), "error must hold ",
              num(mok::sm90::sm90_moe_error_words()), " int32");
  TORCH_CHECK(variant == 0 || variant == 1, "variant must be 0 (simple) or 1 (pipelined), got ", num(variant));
  const bool save = saved_gate_up.numel() > 0;
  if (save) {
    check_tensor(saved_gate_up, "saved_gate_up", at::kBFloat16, device);
    check_shape(saved_gate_up, "saved_gate_up", {own_ranks * capacity, 2 * I});
  }

  const bool tracing = trace.numel() > 0;
  if (tracing) {
    check_tensor(trace, "trace", at::kLong, device);
    TORCH_CHECK(trace.dim() == 2 && trace.size(1) == mok::sm90::kSm90TraceFields && trace.size(0) <= INT32_MAX,
                "trace must be [tickets, ", num(mok::sm90::kSm90TraceFields), "] int64, got ", dims(trace.sizes()));
  }

  const bool down_tma = y.numel() > 0;
  TORCH_CHECK(down_tma == (y_rows.numel() > 0), "y and y_rows come together (down_tma) or are both empty");
  if (down_tma) {
    check_tensor(y, "y", at::kBFloat16, device);
    check_shape(y, "y", {R * capacity, H});
    check_tensor(y_rows, "y_rows", at::kInt, device);
    check_shape(y_rows, "y_rows", {R, tokens_per_rank * top_k});
  }

  const bool early_combine = combine_tokens.numel() > 0;
  TORCH_CHECK(early_combine == (combine_offsets.numel() > 0),
              "combine_tokens and combine_offsets come together (early combine) or are both empty");
  if (early_combine) {
    check_tensor(combine_tokens, "combine_tokens", at::kInt, device);
    check_tensor(combine_offsets, "combine_offsets", at::kInt, device);
    check_shape(combine_tokens, "combine_tokens", {R, tokens_per_rank});
    TORCH_CHECK(minibatch_rows > 0, "minibatch_rows must be positive, got ", num(minibatch_rows));
    check_shape(combine_offsets, "combine_offsets", {R, (capacity + minibatch_rows - 1) / minibatch_rows + 1});
  }

  mok::sm90::Sm90MoeProblem q;
  q.num_ranks = static_cast<int>(R);
  q.tokens_per_rank = static_cast<int>(tokens_per_rank);
  q.top_k = static_cast<int>(top_k);
  q.hidden = static_cast<int>(H);
  q.intermediate = static_cast<int>(I);
  q.num_experts = static_cast<int>(E);
  q.capacity = static_cast<int>(capacity);
  q.minibatch_rows = static_cast<int>(minibatch_rows);
  q.ring_rows = static_cast<int>(ring_rows);
  q.src_rank = src_rank.data_ptr<int32_t>();
  q.src_slot = src_slot.data_ptr<int32_t>();
  q.tile_expert = tile_expert.data_ptr<int32_t>();
  q.segment_offsets = segment_offsets.data_ptr<int32_t>();
  q.combine_tokens = early_combine ? combine_tokens.data_ptr<int32_t>() : nullptr;
  q.combine_offsets = early_combine ? combine_offsets.data_ptr<int32_t>() : nullptr;
  q.x_ptrs = x_ptrs.data_ptr<int64_t>();
  q.weight_ptrs = weight_ptrs.data_ptr<int64_t>();
  q.combine_ptrs = combine_ptrs.data_ptr<int64_t>();
  q.out_ptrs = out_ptrs.data_ptr<int64_t>();
  q.w_gate = w_gate.data_ptr();
  q.w_up = w_up.data_ptr();
  q.w_down = w_down.data_ptr();
  q.ring_x = ring_x.data_ptr();
  q.ring_h = ring_h.data_ptr();
  q.saved_gate_up = save ? saved_gate_up.data_ptr() : nullptr;
  q.counters = counters.data_ptr<int32_t>();
  q.error = error.data_ptr<int32_t>();
  q.fuse_top1 = fuse_top1;
  q.ablate = static_cast<int>(ablate);
  q.gather_x = gather_x;
  q.gather_prefetch = static_cast<int>(gather_prefetch);
  q.gather_row_prefetch = gather_row_prefetch;
  q.signal_warp = signal_warp;
  q.store_warps = store_warps;
  q.skip_padding_half = skip_padding_half;
  q.down_span = static_cast<int>(down_span);
  q.overlap_steps = overlap_steps;
  q.down_ping_pong = down_ping_pong;
  q.first_dispatch_parts = static_cast<int>(first_dispatch_parts);
  q.sum_kernel = sum_kernel;
  q.clusters = clusters;
  q.spread_dispatch = spread_dispatch;
  q.y = down_tma ? y.data_ptr() : nullptr;
  q.y_rows = down_tma ? y_rows.data_ptr<int32_t>() : nullptr;
  q.trace = tracing ? trace.data_ptr<int64_t>() : nullptr;
  q.trace_tickets = tracing ? static_cast<int>(trace.size(0)) : 0;
  q.mxfp8 = mxfp8;
  q.x_row_bytes = static_cast<int>(x_row_bytes);
  q.local_rank = static_cast<int>(local_rank);
  q.phases = static_cast<int>(phases);
  q.variant = variant == 1 ? mok::sm90::Sm90Variant::kPipelined : mok::sm90::Sm90Variant::kSimple;
  q.num_ctas = static_cast<int>(num_ctas);
  q.timeout_s = timeout_s;

  char message[512] = {0};
  const int rc = mok::sm90::sm90_moe_forward(q, c10::cuda::getCurrentCUDAStream(device.index()).stream(), message,
                                             sizeof(message));
  TORCH_CHECK(rc == 0, "mok SM90 MoE forward: ", message);
}

// The schedule tables on the device (csrc/schedule_tables.cu) from the routing sorted by expert:
//   expert_sorted [N] int32 ascending, slot_sorted [N] int64 (torch.sort(topk_ids.flatten(), stable=True)), and
//   optionally run_start [E + 1] int32, each expert's first sorted index (expert_sort returns it; else searched).
//   Its values are trusted: it must be expert_sort's for these same sorted ids (one from other ids makes the rows
//   kernel read slot_sorted out of range); mok.cuda.schedule_tables passes nothing else.
// Returns [src_rank [R, C], src_slot [R, C], segment_offsets [R, E/R + 1], tile_expert [R, C / tile]], int32,
// enqueued on the current stream (no synchronisation).
std::vector<at::Tensor> schedule_tables(const at::Tensor& expert_sorted, const at::Tensor& slot_sorted,
                                        int64_t num_experts, int64_t num_ranks, int64_t tile, int64_t capacity,
                                        int64_t slots_per_rank, const c10::optional<at::Tensor>& run_start_given) {
  const at::Device device = expert_sorted.device();
  TORCH_CHECK(device.is_cuda(), "schedule_tables needs CUDA tensors");
  const c10::cuda::CUDAGuard guard(device);
  check_tensor(expert_sorted, "expert_sorted", at::kInt, device);
  check_tensor(slot_sorted, "slot_sorted", at::kLong, device);
  TORCH_CHECK(expert_sorted.dim() == 1 && slot_sorted.sizes().equals(expert_sorted.sizes()),
              "expert_sorted and slot_sorted must be 1-D of one length, got ", dims(expert_sorted.sizes()), " and ",
              dims(slot_sorted.sizes()));
  TORCH_CHECK(expert_sorted.numel() < (int64_t{1} << 31), "too many slots for 32-bit indexing");
  TORCH_CHECK(num_ranks >= 1 && num_experts % num_ranks == 0 && tile >= 1 && capacity % tile == 0,
              "schedule_tables: bad sizes (experts ", num(num_experts), ", ranks ", num(num_ranks), ", tile ",
              num(tile), ", capacity ", num(capacity), ")");
  const auto options = expert_sorted.options();
  if (run_start_given.has_value()) {
    check_tensor(*run_start_given, "run_start", at::kInt, device);
    TORCH_CHECK(run_start_given->dim() == 1 && run_start_given->numel() == num_experts + 1,
                "schedule_tables: run_start must be 1-D of E + 1 = ", num(num_experts + 1), ", got ",
                dims(run_start_given->sizes()));
  }
  at::Tensor run_start = run_start_given.has_value() ? *run_start_given : at::empty({num_experts + 1}, options);
  at::Tensor segment_offsets = at::empty({num_ranks, num_experts / num_ranks + 1}, options);
  at::Tensor src_rank = at::empty({num_ranks, capacity}, options);
  at::Tensor src_slot = at::empty({num_ranks, capacity}, options);
  at::Tensor tile_expert = at::empty({num_ranks, capacity / tile}, options);

  mok::sm90::Sm90ScheduleProblem q;
  q.expert_sorted = expert_sorted.data_ptr<int32_t>();
  q.slot_sorted = slot_sorted.data_ptr<int64_t>();
  q.num_slots = static_cast<int>(expert_sorted.numel());
  q.num_experts = static_cast<int>(num_experts);
  q.num_ranks = static_cast<int>(num_ranks);
  q.tile = static_cast<int>(tile);
  q.capacity = static_cast<int>(capacity);
  q.slots_per_rank = static_cast<int>(slots_per_rank);
  q.run_start = run_start.data_ptr<int32_t>();
  q.run_start_given = run_start_given.has_value();
  q.segment_offsets = segment_offsets.data_ptr<int32_t>();
  q.src_rank = src_rank.data_ptr<int32_t>();
  q.src_slot = src_slot.data_ptr<int32_t>();
  q.tile_expert = tile_expert.data_ptr<int32_t>();
  char message[512] = {0};
  const int rc = mok::sm90::sm90_schedule_tables(q, c10::cuda::getCurrentCUDAStream(device.index()).stream(),
                                                 message, sizeof(message));
  TORCH_CHECK(rc == 0, "mok ", message);
  return {src_rank, src_slot, segment_offsets, tile_expert};
}

// The routing's slots stably sorted by expert (csrc/schedule_tables.cu, a counting sort in two kernels): ids [N] int32
// in [0, E) -> [expert_sorted [N] int32, slot_sorted [N] int64], what torch.sort(ids, stable=True) returns, and
// run_start [E + 1] int32 (each expert's first sorted index, N at E: schedule_tables' run_start), enqueued on the
// current stream. N <= kExpertSortMaxSlots, E <= kExpertSortMaxExperts (launch.cuh).
std::vector<at::Tensor> expert_sort(const at::Tensor& ids, int64_t num_experts) {
  const at::Device device = ids.device();
  TORCH_CHECK(device.is_cuda(), "expert_sort needs a CUDA tensor");
  const c10::cuda::CUDAGuard guard(device);
  // Not check_tensor: the kernel reads the ids one int at a time, so a view at any int offset (a slice of the routing)
  // is fine, where the tensors TMA or 16-byte copies read must be 16-byte aligned.
  TORCH_CHECK(ids.scalar_type() == at::kInt && ids.is_contiguous() && ids.dim() == 1,
              "expert_sort: ids must be a contiguous 1-D int32 tensor, got ", ids.scalar_type(), " ",
              dims(ids.sizes()));
  TORCH_CHECK(ids.numel() >= 1 && ids.numel() <= mok::sm90::kExpertSortMaxSlots && num_experts >= 1 &&
                  num_experts <= mok::sm90::kExpertSortMaxExperts,
              "expert_sort: needs 1..", num(mok::sm90::kExpertSortMaxSlots), " slots and 1..",
              num(mok::sm90::kExpertSortMaxExperts), " experts, got ", num(ids.numel()), " and ", num(num_experts));
  at::Tensor expert_sorted = at::empty_like(ids);
  at::Tensor slot_sorted = at::empty(ids.sizes(), ids.options().dtype(at::kLong));
  at::Tensor run_start = at::empty({num_experts + 1}, ids.options());
  at::Tensor cta_counts =
      at::empty({mok::sm90::expert_sort_ctas(static_cast<int>(ids.numel())) * num_experts}, ids.options());
  char message[512] = {0};
  const int rc = mok::sm90::sm90_expert_sort(ids.data_ptr<int32_t>(), static_cast<int>(ids.numel()),
                                             static_cast<int>(num_experts), cta_counts.data_ptr<int32_t>(),
                                             expert_sorted.data_ptr<int32_t>(), slot_sorted.data_ptr<int64_t>(),
                                             run_start.data_ptr<int32_t>(),
                                             c10::cuda::getCurrentCUDAStream(device.index()).stream(), message,
                                             sizeof(message));
  TORCH_CHECK(rc == 0, "mok ", message);
  return {expert_sorted, slot_sorted, run_start};
}

// The router's top-k (csrc/router_topk.cu): logits [T, E] fp32 with unit column stride -> [ids [T, top_k] int32,
// weights [T, top_k] fp32] (weights empty for weighting kTopkIdsOnly), enqueued on the current stream. E <= 512,
// top_k <= 32; weighting as launch.cuh's RouterTopkWeighting.
std::vector<at::Tensor> router_topk(const at::Tensor& logits, int64_t top_k, int64_t weighting) {
  const at::Device device = logits.device();
  TORCH_CHECK(device.is_cuda(), "router_topk needs a CUDA tensor");
  const c10::cuda::CUDAGuard guard(device);
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.dim() == 2 && logits.stride(1) == 1,
              "router_topk: logits must be a 2-D fp32 tensor with contiguous rows, got ", logits.scalar_type(), " ",
              dims(logits.sizes()));
  const int64_t num_tokens = logits.size(0), num_experts = logits.size(1);
  TORCH_CHECK(num_tokens <= INT32_MAX && num_experts <= mok::sm90::kRouterTopkMaxExperts && top_k >= 1 &&
                  top_k <= mok::sm90::kRouterTopkMaxK && top_k <= num_experts,
              "router_topk: needs 1 <= top_k <= min(", num(mok::sm90::kRouterTopkMaxK), ", experts) and at most ",
              num(mok::sm90::kRouterTopkMaxExperts), " experts, got top_k ", num(top_k), " and ", num(num_experts),
              " experts");
  at::Tensor ids = at::empty({num_tokens, top_k}, logits.options().dtype(at::kInt));
  const bool weighed = weighting != mok::sm90::kTopkIdsOnly;
  at::Tensor weights = at::empty({weighed ? num_tokens : 0, top_k}, logits.options());
  char message[512] = {0};
  const int rc = mok::sm90::sm90_router_topk(logits.data_ptr<float>(), logits.stride(0), static_cast<int>(num_tokens),
                                             static_cast<int>(num_experts), static_cast<int>(top_k),
                                             static_cast<int>(weighting), ids.data_ptr<int32_t>(),
                                             weighed ? weights.data_ptr<float>() : nullptr,
                                             c10::cuda::getCurrentCUDAStream(device.index()).stream(), message,
                                             sizeof(message));
  TORCH_CHECK(rc == 0, "mok ", message);
  return {ids, weights};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "mok SM90 MoE forward megakernel";
  m.def("forward", &forward, "Launch the SM90 MoE forward megakernel on the current stream (see binding.cpp)");
  m.def("schedule_tables", &schedule_tables, "The schedule tables on the device from the expert-sorted routing",
        pybind11::arg("expert_sorted"), pybind11::arg("slot_sorted"), pybind11::arg("num_experts"),
        pybind11::arg("num_ranks"), pybind11::arg("tile"), pybind11::arg("capacity"), pybind11::arg("slots_per_rank"),
        pybind11::arg("run_start") = pybind11::none());
  m.def("expert_sort", &expert_sort, "The routing's slots stably sorted by expert (a counting sort)");
  m.def("router_topk", &router_topk, "The router's top-k ids and weights, one warp per token (csrc/router_topk.cu)",
        pybind11::arg("logits"), pybind11::arg("top_k"), pybind11::arg("weighting"));
  m.def("counter_ints", &mok::sm90::sm90_moe_counter_ints, "int32 words of the counter block",
        pybind11::arg("num_ranks"), pybind11::arg("capacity"), pybind11::arg("minibatch_rows"));
  m.def("error_words", &mok::sm90::sm90_moe_error_words, "int32 words of the error record");
  m.def("shared_memory_bytes", &mok::sm90::sm90_moe_shared_memory_bytes, "dynamic shared memory per CTA");
}
