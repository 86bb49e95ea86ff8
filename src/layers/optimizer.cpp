#include "layers/optimizer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "enhanced/common.h"
#include "steps/optimizer_steps.h"

namespace enhanced {

namespace {

// Calls visit(begin, end) for the element ranges a step touches: the touched embedding rows
// (or the whole table) and then everything after the embedding, as one range. Rows are random
// in a table that can be gigabytes, so each row's cache lines in `streams` (the buffers the visit
// reads and writes) are prefetched some rows ahead: the loop is bound by memory latency otherwise.
template <class Visit>
void for_each_range(const ParameterBuffer<float>& buffer, const std::vector<int32_t>& touched_rows, bool rows_only,
                    std::initializer_list<const float*> streams, bool parallel, Visit visit) {
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
          for (const float* stream : streams)
            for (size_t line = 0; line < dim; line += 16) __builtin_prefetch(stream + ahead + line, 1);
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

// SGD, then Adam, over [begin, end) at one weight decay (steps::decay_at's value there). The
// loop without decay passes the constant, so the compiler drops the decay from it: a step
// without weight decay costs what it did before weight decay existed.
void sgd_range(size_t begin, size_t end, float* w, float* v, const float* g, float scale, float lr, float mu,
               float weight_decay, bool first_step) {
  if (weight_decay == 0.0f) {
    for (size_t i = begin; i < end; ++i)
      steps::sgd_update(static_cast<int64_t>(i), w, v, g, scale, lr, mu, 0.0f, first_step);
  } else {
    for (size_t i = begin; i < end; ++i)
      steps::sgd_update(static_cast<int64_t>(i), w, v, g, scale, lr, mu, weight_decay, first_step);
  }
}

void adam_range(size_t begin, size_t end, float* w, float* m, float* v, const float* g, float scale,
                const OptimizerConfig& c, const steps::StepScalars& s, float decay) {
  const float b1 = c.beta1, b2 = c.beta2, eps = c.epsilon;
  const float step_size = s.adam_step_size, correction = s.adam_bias_correction2_sqrt;
  if (decay == 1.0f) {
    for (size_t i = begin; i < end; ++i)
      steps::adam_update(static_cast<int64_t>(i), w, m, v, g, scale, b1, b2, eps, step_size, correction, 1.0f);
  } else {
    for (size_t i = begin; i < end; ++i)
      steps::adam_update(static_cast<int64_t>(i), w, m, v, g, scale, b1, b2, eps, step_size, correction, decay);
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
  if (!std::isfinite(norm))
    fail("non-finite gradient (norm ", norm, ") at step ", state.steps + 1, "; weights left unchanged");
  const float scale = steps::clip_factor(norm, c.clip_norm);
  const steps::StepScalars scalars = steps::step_scalars(c, ++state.steps, learning_rate);
  float* w = params.data.data();
  const float* g = grads.data.data();
  // Weight decay is steps::decay_at's: one value in the table, one after it, so each range is
  // split at the table's end and its loops stay free of the per-element choice.
  const size_t table = params.embedding_size();
  const auto split = [table](size_t begin, size_t end) { return std::clamp(table, begin, end); };
  const bool embedding = c.weight_decay_embedding;
  if (c.kind == OptimizerKind::sgd) {
    const float lr = scalars.learning_rate, mu = c.momentum, wd = c.weight_decay;
    const float decay[2] = {steps::decay_at(0, table, embedding, wd, 0.0f),
                            steps::decay_at(static_cast<int64_t>(table), table, embedding, wd, 0.0f)};
    float* v = mu > 0 ? state.moments[0].data.data() : nullptr;
    const bool first_step = scalars.first_step != 0;
    for_each_range(params, touched_rows, rows, {w, g, v ? v : w}, true, [&](size_t begin, size_t end) {
      const size_t middle = split(begin, end);
      sgd_range(begin, middle, w, v, g, scale, lr, mu, decay[0], first_step);
      sgd_range(middle, end, w, v, g, scale, lr, mu, decay[1], first_step);
    });
  } else {
    float* m = state.moments[0].data.data();
    float* v = state.moments[1].data.data();
    const float decay[2] = {steps::decay_at(0, table, embedding, scalars.adamw_decay, 1.0f),
                            steps::decay_at(static_cast<int64_t>(table), table, embedding, scalars.adamw_decay, 1.0f)};
    for_each_range(params, touched_rows, rows, {w, g, m, v}, true, [&](size_t begin, size_t end) {
      const size_t middle = split(begin, end);
      adam_range(begin, middle, w, m, v, g, scale, c, scalars, decay[0]);
      adam_range(middle, end, w, m, v, g, scale, c, scalars, decay[1]);
    });
  }
  return norm;
}

void zero_gradients(ParameterBuffer<float>& grads, const std::vector<int32_t>& touched_rows) {
  for_each_range(grads, touched_rows, true, {grads.data.data()}, true,
                 [&](size_t begin, size_t end) { std::fill(grads.data.begin() + begin, grads.data.begin() + end, 0.0f); });
}

}  // namespace enhanced
