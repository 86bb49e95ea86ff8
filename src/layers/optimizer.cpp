#include "layers/optimizer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "enhanced/common.h"
#include "layers/cpu/multiversion.h"
#include "steps/optimizer_steps.h"

namespace enhanced {

namespace {

// Calls visit(begin, end) for the element ranges a step touches: the touched embedding rows
// (or the whole table) and then everything after the embedding, as one range. Rows are random
// in a table that can be gigabytes, so each row's cache lines in `streams` (the buffers the visit
// reads and writes) are prefetched some rows ahead: the loop is bound by memory latency otherwise.
struct Streams {
  const float* at[2 + steps::kMaxMoments] = {};
  size_t count = 0;
  Streams(std::initializer_list<const float*> list) {
    for (const float* stream : list) at[count++] = stream;
  }
};

template <class Visit>
void for_each_range(const ParameterBuffer<float>& buffer, const std::vector<int32_t>& touched_rows, bool rows_only,
                    const Streams& streams, bool parallel, Visit visit) {
  const size_t dim = static_cast<size_t>(buffer.config.embedding_dim);
  const size_t table = buffer.embedding_size();
  // Work is split over the threads only where visit is element-wise (the same bits for any
  // split); the gradient norm's sum stays in one fixed order.
  const int threads = parallel ? omp_get_max_threads() : 1;
  if (rows_only) {
    constexpr size_t kAhead = 8;
    const size_t count = touched_rows.size();
    const int parts = count >= 4096 ? threads : 1;
#pragma omp parallel for schedule(static) num_threads(parts)
    for (int part = 0; part < parts; ++part) {
      const size_t end = count * static_cast<size_t>(part + 1) / parts;
      for (size_t i = count * static_cast<size_t>(part) / parts; i < end; ++i) {
        if (i + kAhead < end) {
          const size_t ahead = static_cast<size_t>(touched_rows[i + kAhead]) * dim;
          for (size_t stream = 0; stream < streams.count; ++stream)
            for (size_t line = 0; line < dim; line += 16) __builtin_prefetch(streams.at[stream] + ahead + line, 1);
        }
        const size_t row = static_cast<size_t>(touched_rows[i]);
        visit(row * dim, (row + 1) * dim);
      }
    }
    visit(table, buffer.size());
  } else {
    const size_t total = buffer.size();
    const int parts = total >= (size_t{1} << 18) ? threads : 1;
#pragma omp parallel for schedule(static) num_threads(parts)
    for (int part = 0; part < parts; ++part)
      visit(total * static_cast<size_t>(part) / parts, total * static_cast<size_t>(part + 1) / parts);
  }
}

// An optimizer's update (steps/optimizer_steps.h's) over [begin, end) at one weight decay
// (steps::decay_at's value there). The loop without decay passes the constant, so the compiler
// drops the decay from it: a step without weight decay costs what it did before weight decay
// existed.
template <class Update>
ENHANCED_MULTIVERSION void update_range(size_t begin, size_t end, const Update update, float* w,
                                        const steps::Moments moments, const float* g, float scale, float decay) {
  if (decay == Update::no_decay) {
    for (size_t i = begin; i < end; ++i) update(static_cast<int64_t>(i), w, moments, g, scale, Update::no_decay);
  } else {
    for (size_t i = begin; i < end; ++i) update(static_cast<int64_t>(i), w, moments, g, scale, decay);
  }
}

}  // namespace

double optimizer_step(ParameterBuffer<float>& params, OptimizerState& state, const ParameterBuffer<float>& grads,
                      const std::vector<int32_t>& touched_rows, float learning_rate) {
  const OptimizerConfig& c = state.config;
  check_step_learning_rate(learning_rate, state.steps + 1);
  const bool rows = rows_only(c);
  // Every row outside touched_rows has a zero gradient, so the norm needs the touched ones only.
  double sum_squares = 0;
  for_each_range(grads, touched_rows, true, {grads.data.data()}, false, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) sum_squares += static_cast<double>(grads.data[i]) * grads.data[i];
  });
  const double norm = std::sqrt(sum_squares);
  if (!std::isfinite(norm)) return norm;  // the step is skipped; the engine halts (steps::account_update)
  const float scale = steps::clip_factor(norm, c.clip_norm);
  const steps::StepScalars scalars = steps::step_scalars(c, ++state.steps, learning_rate);
  float* w = params.data.data();
  const float* g = grads.data.data();
  // Weight decay is steps::decay_at's: one value in the table, one after it, so each range is
  // split at the table's end and its loops stay free of the per-element choice.
  const size_t table = params.embedding_size();
  const auto split = [table](size_t begin, size_t end) { return std::clamp(table, begin, end); };
  const bool embedding = c.weight_decay_embedding;
  steps::Moments moments;
  Streams streams{w, g};
  if (state.moments.size() > steps::kMaxMoments) fail("internal: more moments than steps::kMaxMoments");
  for (size_t i = 0; i < state.moments.size(); ++i) {
    moments.at[i] = state.moments[i].data.data();
    streams.at[streams.count++] = moments.at[i];
  }
  steps::with_update(c.kind, [&](auto kind) {
    using Update = decltype(kind);
    const Update update = Update::of(c, scalars);
    const float decay[2] = {steps::decay_at(0, table, embedding, update.decay(), Update::no_decay),
                            steps::decay_at(static_cast<int64_t>(table), table, embedding, update.decay(),
                                            Update::no_decay)};
    for_each_range(params, touched_rows, rows, streams, true, [&](size_t begin, size_t end) {
      const size_t middle = split(begin, end);
      update_range(begin, middle, update, w, moments, g, scale, decay[0]);
      update_range(middle, end, update, w, moments, g, scale, decay[1]);
    });
  });
  return norm;
}

void zero_gradients(ParameterBuffer<float>& grads, const std::vector<int32_t>& touched_rows) {
  for_each_range(grads, touched_rows, true, {grads.data.data()}, true,
                 [&](size_t begin, size_t end) { std::fill(grads.data.begin() + begin, grads.data.begin() + end, 0.0f); });
}

}  // namespace enhanced
