#include "enhanced/optimizer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "enhanced/common.h"

namespace enhanced {

OptimizerKind parse_optimizer_kind(const std::string& text) {
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "adam") return OptimizerKind::adam;
  fail("unknown optimizer '", text, "' (expected sgd or adam)");
}

const char* to_string(OptimizerKind kind) { return kind == OptimizerKind::sgd ? "sgd" : "adam"; }

Optimizer::Optimizer(const OptimizerConfig& config, const ModelConfig& model) : config_(config) {
  if (!(config.learning_rate > 0) || !std::isfinite(config.learning_rate))
    fail("learning rate must be positive and finite, got ", config.learning_rate);
  if (!(config.momentum >= 0 && config.momentum < 1)) fail("momentum must be in [0, 1), got ", config.momentum);
  if (!(config.beta1 >= 0 && config.beta1 < 1)) fail("Adam beta1 must be in [0, 1), got ", config.beta1);
  if (!(config.beta2 >= 0 && config.beta2 < 1)) fail("Adam beta2 must be in [0, 1), got ", config.beta2);
  if (!(config.epsilon > 0) || !std::isfinite(config.epsilon))
    fail("Adam epsilon must be positive and finite, got ", config.epsilon);
  if (!(config.clip_norm >= 0)) fail("--clip-norm must be >= 0 (0: off), got ", config.clip_norm);
  if (config.kind == OptimizerKind::sgd) {
    if (config.momentum > 0) first_moment_ = ParameterBuffer<float>(model);
  } else {
    first_moment_ = ParameterBuffer<float>(model);
    second_moment_ = ParameterBuffer<float>(model);
  }
}

bool Optimizer::embedding_rows_only() const {
  // Plain SGD moves only rows with a gradient, so skipping the rest is exact, not lazy.
  return config_.lazy_embedding || (config_.kind == OptimizerKind::sgd && config_.momentum == 0);
}

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

}  // namespace

double Optimizer::step(ParameterBuffer<float>& params, const ParameterBuffer<float>& grads,
                       const std::vector<int32_t>& touched_rows) {
  const bool rows_only = embedding_rows_only();
  // Every row outside touched_rows has a zero gradient, so the norm needs the touched ones only.
  double sum_squares = 0;
  for_each_range(grads, touched_rows, true, {grads.data.data()}, false, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) sum_squares += static_cast<double>(grads.data[i]) * grads.data[i];
  });
  const double norm = std::sqrt(sum_squares);
  if (!std::isfinite(norm)) fail("non-finite gradient (norm ", norm, ") at step ", steps_ + 1, "; weights left unchanged");
  float scale = 1.0f;
  if (config_.clip_norm > 0 && norm > config_.clip_norm)
    scale = static_cast<float>(config_.clip_norm / (norm + 1e-6));  // torch.nn.utils.clip_grad_norm_
  ++steps_;
  float* w = params.data.data();
  const float* g = grads.data.data();
  const float lr = config_.learning_rate;
  if (config_.kind == OptimizerKind::sgd) {
    const float mu = config_.momentum;
    float* v = first_moment_.data.data();
    for_each_range(params, touched_rows, rows_only, {w, g, mu > 0 ? v : w}, true, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const float gradient = g[i] * scale;
        if (mu > 0) {
          // torch: the first step starts the buffer at g.
          v[i] = steps_ == 1 ? gradient : mu * v[i] + gradient;
          w[i] -= lr * v[i];
        } else {
          w[i] -= lr * gradient;
        }
      }
    });
  } else {
    // PyTorch's Adam arithmetic: w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
    const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.epsilon;
    const double t = static_cast<double>(steps_);
    const float step_size = static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(b1), t)));
    const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)));
    float* m = first_moment_.data.data();
    float* v = second_moment_.data.data();
    for_each_range(params, touched_rows, rows_only, {w, g, m, v}, true, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        const float gradient = g[i] * scale;
        m[i] = b1 * m[i] + (1 - b1) * gradient;
        v[i] = b2 * v[i] + (1 - b2) * gradient * gradient;
        w[i] -= step_size * m[i] / (std::sqrt(v[i]) / bias_correction2_sqrt + eps);
      }
    });
  }
  return norm;
}

void Optimizer::save_state(SafetensorsWriter& writer) const {
  const uint64_t steps = static_cast<uint64_t>(steps_);
  writer.add("optimizer.steps", &steps, {1});
  writer.set_metadata("optimizer", to_string(config_.kind));
  const std::pair<const char*, const ParameterBuffer<float>*> moments[] = {{"m", &first_moment_},
                                                                            {"v", &second_moment_}};
  for (const auto& [moment, buffer] : moments) {
    if (buffer->data.empty()) continue;
    for (const TensorSlot& slot : parameter_layout(buffer->config))
      writer.add(cat("optimizer.", moment, ".", slot.name), buffer->data.data() + slot.offset, slot.shape);
  }
}

void Optimizer::load_state(const SafetensorsReader& reader) {
  if (reader.metadata_value("optimizer") != to_string(config_.kind))
    fail(reader.path(), ": optimizer state is for ", reader.metadata_value("optimizer"), ", this run uses ",
         to_string(config_.kind));
  steps_ = static_cast<int64_t>(reader.uint64s("optimizer.steps").at(0));
  const std::pair<const char*, ParameterBuffer<float>*> moments[] = {{"m", &first_moment_}, {"v", &second_moment_}};
  for (const auto& [moment, buffer] : moments) {
    if (buffer->data.empty()) continue;
    for (const TensorSlot& slot : parameter_layout(buffer->config)) {
      const std::vector<float> values = reader.floats(cat("optimizer.", moment, ".", slot.name), slot.shape);
      std::memcpy(buffer->data.data() + slot.offset, values.data(), values.size() * sizeof(float));
    }
  }
}

void zero_gradients(ParameterBuffer<float>& grads, const std::vector<int32_t>& touched_rows) {
  for_each_range(grads, touched_rows, true, {grads.data.data()}, true,
                 [&](size_t begin, size_t end) { std::fill(grads.data.begin() + begin, grads.data.begin() + end, 0.0f); });
}

}  // namespace enhanced
