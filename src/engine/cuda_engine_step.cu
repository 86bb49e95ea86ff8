// The CUDA engine's step pipeline (cuda_engine_state.h's CudaEngineState): batches validated and uploaded on the copy
// stream into two staging slots, each training step replayed from a CUDA graph captured for its
// (batch size, slot) after an eager first run, the forward, backward and optimizer passes, and in
// a data-parallel run the shard before the collectives and the merge after them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "engine/cuda_engine_state.h"
#include "enhanced/data_parallel.h"
#include "steps/gradient_exchange_steps.h"
#include "steps/softmax_xent_steps.h"

namespace enhanced {

// Out-of-range ids would fault on the device (and poison the context): check_batch finds them.
void CudaEngineState::validate(const Batch& batch) const { check_batch(batch, config, max_batch); }

// Queues grads = 0 over the rows the last backward left (written_rows) and everything after the
// table; eager, never inside a captured graph.
void CudaEngineState::clear_gradients() {
  if (written_rows == steps::GradientRows::clear) return;
  cuda::zero_gradients(grads.data.data(), range(written_rows, true), s());
  written_rows = steps::GradientRows::clear;
}

void CudaEngineState::allocate_batch_blocks() {
  for (Slot& slot : slots) {
    slot.staging.resize(layout.ids + id_capacity);
    slot.block.resize(layout.ids + id_capacity);
    slot.used = false;
  }
  ++batch_generation;
}

// Rare: a batch with more identifier ids than the buffers hold. Everything in flight finishes,
// the previous backward's gradients are cleared (growing the workspace forgets its touched
// rows), and the buffers grow with headroom; captured graphs become stale and are recaptured.
void CudaEngineState::grow_ids(size_t ids) {
  drain();
  clear_gradients();
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  id_capacity = ids + ids / 2;
  allocate_batch_blocks();
  const int max_positions = pass_batch * config.seq_len;
  embedding_workspace.reserve(max_positions, static_cast<int64_t>(id_capacity), config.vocab_size,
                              config.embedding_dim, s());
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
}

CudaEngineState::BatchView CudaEngineState::enqueue(const Batch& batch, StepKind kind, float learning_rate) {
  validate(batch);  // the whole batch: in a data-parallel run every rank finds a bad one alike
  if (kind == StepKind::train) check_step_learning_rate(learning_rate, steps + 1);
  // A data-parallel training step computes this rank's shard of the batch; forward (evaluation
  // is given its shard by the caller) and compute_gradients stay local, as on the CPU.
  cuda::LossDenominator whole;
  const bool sharded = exchange && kind == StepKind::train;
  const Batch& part = sharded ? shard_of_step(batch, whole) : batch;
  if (part.size > pass_batch)
    fail("internal: a pass of ", part.size, " samples; this rank's buffers hold its shard, 1..", pass_batch);
  const size_t P = static_cast<size_t>(part.positions());
  const size_t ids = part.identifier_ids.size();
  if (ids > id_capacity) grow_ids(ids);

  const int index = next_slot;
  next_slot ^= 1;
  Slot& slot = slots[index];
  // The staging memory is free once its previous upload finished (two steps back).
  if (slot.used) ENHANCED_CUDA_CHECK(cudaEventSynchronize(slot.uploaded));
  int32_t* at = slot.staging.data();
  const StepScalars header = cuda::step_scalars(optimizer, steps + 1, learning_rate);
  std::memcpy(at, &header, sizeof header);
  std::memcpy(at + kWholeInts, &whole, sizeof whole);
  std::memcpy(at + layout.offsets, part.identifier_offsets.data(), (P + 1) * sizeof(int32_t));
  if (P) std::memcpy(at + layout.cur, part.cur_word_ids.data(), P * sizeof(int32_t));
  if (part.size) std::memcpy(at + layout.labels, part.labels.data(), part.labels.size() * sizeof(int32_t));
  if (ids) std::memcpy(at + layout.ids, part.identifier_ids.data(), ids * sizeof(int32_t));
  // The device block is free once the step that read it finished.
  if (slot.used) ENHANCED_CUDA_CHECK(cudaStreamWaitEvent(copy_stream.get(), slot.consumed, 0));
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(slot.block.data(), at, (layout.ids + ids) * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, copy_stream.get()));
  ENHANCED_CUDA_CHECK(cudaEventRecord(slot.uploaded, copy_stream.get()));
  ENHANCED_CUDA_CHECK(cudaStreamWaitEvent(s(), slot.uploaded, 0));
  slot.used = true;  // from here the next use of the slot must wait for this one

  BatchView view;
  view.size = part.size;
  view.positions = static_cast<int>(P);
  const int32_t* block = slot.block.data();
  view.scalars = reinterpret_cast<const StepScalars*>(block);
  if (sharded) view.whole = reinterpret_cast<const cuda::LossDenominator*>(block + kWholeInts);
  view.offsets = block + layout.offsets;
  view.cur = block + layout.cur;
  view.labels = block + layout.labels;
  view.identifiers = block + layout.ids;
  // A backward clears the rows its own list names (backward_pass): when the last backward left
  // its rows in the other list (compute_gradients between data-parallel steps), clear those now.
  const steps::GradientRows writes = rows_of(view);
  if (kind != StepKind::forward && written_rows != writes) clear_gradients();
  try {
    run_step(view, kind, index);
  } catch (...) {
    static_cast<void>(cudaEventRecord(slot.consumed, s()));  // whatever was queued still reads the slot
    throw;
  }
  ENHANCED_CUDA_CHECK(cudaEventRecord(slot.consumed, s()));
  if (kind != StepKind::forward) written_rows = writes;
  if (kind == StepKind::train) ++steps;
  return view;
}

// A training step replays its (batch size, slot) graph; the first run of a shape is eager (it
// also brings every kernel in, which capture must not do), the second is captured. A capture
// that fails turns graphs off for this model, with the reason, and the step runs eagerly.
//
// A data-parallel step is two graphs with the NCCL collectives between them, eager on the same
// stream: NCCL can be captured (>= 2.9), but only when every rank captures the same collectives
// alike, and here capture is each rank's own affair (a rank's shard size picks its graphs and
// its cuDNN workspace growth, a failed capture turns one rank's graphs off).
void CudaEngineState::run_step(const BatchView& b, StepKind kind, int slot) {
  if (!b.whole) {
    if (kind != StepKind::train) return run_eager(b, kind);
    return run_graph(b, slot, 0, [&] { run_eager(b, kind); });
  }
  // Only training steps are sharded (enqueue).
  const steps::DensePart dense =
      steps::dense_part(static_cast<size_t>(config.vocab_size) * config.embedding_dim, grads.data.size());
  run_graph(b, slot, 1, [&] { shard_pass(b); });
  exchange->communicate(grads.data.data() + dense.offset, dense.count, shard_sums.data(), 2, s());
  run_graph(b, slot, 2, [&] { merge_pass(b); });
}

template <class Body>
void CudaEngineState::run_graph(const BatchView& b, int slot, int phase, const Body& body) {
  if (!graphs_off.empty()) return body();
  auto found = std::find_if(graphs.begin(), graphs.end(), [&](const StepGraph& g) {
    return g.batch == b.size && g.slot == slot && g.phase == phase;
  });
  if (found == graphs.end()) {
    graphs.push_back(StepGraph{b.size, slot, phase, generation(), 0, {}});
    found = graphs.end() - 1;
  }
  StepGraph& graph = *found;
  if (graph.generation != generation()) graph = StepGraph{b.size, slot, phase, generation(), 0, {}};
  if (graph.exec) {
    ENHANCED_CUDA_CHECK(cudaGraphLaunch(graph.exec, s()));
    if (phase < 2) ++replays;
    return;
  }
  if (graph.eager_runs++ == 0) return body();
  cudaGraph_t captured = nullptr;
  ENHANCED_CUDA_CHECK(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal));
  std::string failure;
  try {
    body();
  } catch (const Error& e) {
    failure = e.what();
  }
  const cudaError_t ended = cudaStreamEndCapture(s(), &captured);
  cuda::UniqueGraph owner(captured);
  if (failure.empty() && ended != cudaSuccess) failure = cat("cudaStreamEndCapture: ", cudaGetErrorString(ended));
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, captured, 0);
    if (made != cudaSuccess) failure = cat("cudaGraphInstantiate: ", cudaGetErrorString(made));
  }
  if (!failure.empty()) {
    static_cast<void>(cudaGetLastError());
    graphs_off = "capture failed: " + failure;
    graphs.clear();
    return body();
  }
  graph.exec = cuda::UniqueGraphExec(exec);
  ENHANCED_CUDA_CHECK(cudaGraphLaunch(graph.exec, s()));
  if (phase < 2) ++replays;
}

void CudaEngineState::run_eager(const BatchView& b, StepKind kind) {
  forward_pass(b, kind != StepKind::forward);
  if (kind == StepKind::forward) return;
  backward_pass(b);
  if (kind == StepKind::train) step(b);
}

void CudaEngineState::forward_pass(const BatchView& b, bool with_gradient) {
  const ModelConfig& c = config;
  const int B = b.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  cuda::embedding_blend_forward(act.x, b.offsets, b.identifiers, b.cur, params.embedding, b.positions, D, c.blend,
                                s());
  cuda::bilstm_forward(act.y, *lstm, act.x, params.weight_ih, params.weight_hh, params.bias_ih, params.bias_hh,
                       B, T, D, H, s());
  cuda::maxpool_forward(act.pooled, act.argmax, act.y, B, T, 2 * H, c.pool, s());
  cuda::dense_forward(act.logits, act.pooled, params.dense_weight, params.dense_bias, B, F(), c.num_labels,
                      dense_scratch(), cublas, s());
  // Training steps and compute_gradients weigh the loss by class; evaluation does not.
  const float* weights = with_gradient && class_weights.size() ? class_weights.data() : nullptr;
  cuda::softmax_cross_entropy(with_gradient ? act.dlogits : nullptr, act.sample_losses, scalars.data(),
                              act.logits, b.labels, weights, B, c.num_labels, b.whole, class_weight_mean, s());
}

// The embedding backward sorts room for the most ids a slot holds (the batch's own count is read
// on the device): the same kernels for every batch, so a captured graph serves them all and the
// eager warm-up run before a capture has already loaded each of them.
void CudaEngineState::backward_pass(const BatchView& b) {
  const ModelConfig& c = config;
  const int B = b.size, T = c.seq_len, D = c.embedding_dim, H = c.hidden;
  // grads start at zero: clear what the previous backward wrote (its touched rows, still in this
  // pass's list, as enqueue made sure, and everything after the table); the sort below replaces
  // the touched rows.
  cuda::zero_gradients(grads.data.data(), range(rows_of(b), true), s());
  cuda::dense_backward(act.dpooled, grads.dense_weight, grads.dense_bias, act.dlogits, act.pooled,
                       params.dense_weight, B, F(), c.num_labels, dense_scratch(), cublas, s());
  cuda::maxpool_backward(act.dy, act.argmax, act.dpooled, B, T, 2 * H, c.pool, s());
  cuda::bilstm_backward(act.dx, grads.weight_ih, grads.weight_hh, grads.bias_ih, grads.bias_hh, *lstm, act.y,
                        act.dy, act.x, B, T, D, H, s());
  cuda::embedding_blend_backward(grads.embedding, embedding_workspace, act.dx, b.offsets, b.identifiers, b.cur,
                                 b.positions, static_cast<int64_t>(id_capacity), D, c.blend, s());
}

void CudaEngineState::step(const BatchView& b) {
  const OptimizerConfig& o = optimizer;
  double* loss = scalars.data();
  double* norm = scalars.data() + 1;
  double* partials = scalars.data() + 2;
  if (b.whole) cuda::account_reduced_step(totals.data(), loss, shard_sums.data(), b.whole, b.scalars, s());
  else cuda::account_step(totals.data(), loss, act.logits, b.labels, b.scalars, b.size, config.num_labels, s());
  cuda::gradient_norm(norm, clip_scale.data(), partials, grads.data.data(), &totals.data()->halted,
                      range(rows_of(b), true), o.clip_norm, s());
  const cuda::StepRange visited = range(rows_of(b), rows_only(o));
  steps::Moments moments;
  moments.at[0] = first_moment.data.size() ? first_moment.data.data() : nullptr;
  moments.at[1] = second_moment.data.size() ? second_moment.data.data() : nullptr;
  cuda::optimizer_update(params.data.data(), moments, grads.data.data(), clip_scale.data(), norm, b.scalars, visited,
                         o, s());
  cuda::finish_step(totals.data(), norm, b.scalars, s());
}

// Data-parallel: the step's batch as every rank sees it decides the row bound (the most rows any
// rank's shard can touch: its positions' current words plus its identifier ids, at most V), so
// every rank sizes its collectives alike; returns this rank's shard (take_shard, as the CPU engine)
// and, in `whole`, the whole batch's loss denominators, summed in its sample order.
const Batch& CudaEngineState::shard_of_step(const Batch& batch, cuda::LossDenominator& whole) {
  const int ranks = exchange->size();
  const size_t T = static_cast<size_t>(config.seq_len);
  int64_t most = 0;
  for (int r = 0; r < ranks; ++r) {
    const Shard part = shard_of(batch.size, r, ranks);
    const size_t p0 = static_cast<size_t>(part.first) * T, p1 = p0 + static_cast<size_t>(part.count) * T;
    most = std::max<int64_t>(most, static_cast<int64_t>(p1 - p0) + batch.identifier_offsets[p1] -
                                       batch.identifier_offsets[p0]);
  }
  most = std::min<int64_t>(most, config.vocab_size);
  if (most > exchange->bound()) {
    // Rare (the bound starts at 5 rows a position): the union's rows are forgotten, so clear their
    // gradients first; graphs holding the old buffers are recaptured (the generation changes).
    drain();
    clear_gradients();
    exchange->reserve(most + most / 2, s());
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  }
  take_shard(shard, batch, exchange->rank(), ranks, class_weights_host.empty() ? nullptr : class_weights_host.data(),
             &whole, class_weight_mean);
  return shard;
}

// Before the collectives: this rank's forward and backward over its shard (none when it is empty,
// but its previous rows still clear), its loss share and correct count, its rows packed.
void CudaEngineState::shard_pass(const BatchView& b) {
  if (b.size > 0) {
    forward_pass(b, true);
    cuda::shard_totals(shard_sums.data(), scalars.data(), act.logits, b.labels, b.size, config.num_labels, s());
    backward_pass(b);
    exchange->pack(grads.embedding, embedding_workspace.touched_rows(), embedding_workspace.touched_count(), s());
  } else {
    cuda::zero_gradients(grads.data.data(), range(steps::GradientRows::exchanged, true), s());
    cuda::shard_totals(shard_sums.data(), nullptr, nullptr, nullptr, 0, config.num_labels, s());
    exchange->pack(grads.embedding, nullptr, nullptr, s());
  }
}

// After the collectives: every rank's rows added in rank order, then the optimizer step on the
// whole batch's gradient.
void CudaEngineState::merge_pass(const BatchView& b) {
  exchange->merge(grads.embedding, s());
  step(b);
}

void CudaEngineState::wait_and_read(const BatchView& b, float* logits_out) {
  // The mean loss alone: forward and compute_gradients write no gradient norm (scalars[1]).
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(scalars_host.data(), scalars.data(), sizeof(double), cudaMemcpyDeviceToHost,
                                      s()));
  const size_t logit_count = static_cast<size_t>(b.size) * config.num_labels;
  if (logits_out)
    ENHANCED_CUDA_CHECK(cudaMemcpyAsync(logits_host.data(), act.logits, logit_count * sizeof(float),
                                        cudaMemcpyDeviceToHost, s()));
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(s()));
  if (logits_out) std::memcpy(logits_out, logits_host.data(), logit_count * sizeof(float));
}

}  // namespace enhanced
