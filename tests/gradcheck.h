// Finite-difference gradient checking in double precision, shared by the layer and model tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "enhanced/batch.h"
#include "enhanced/random.h"

namespace enhanced::testing {

// Central difference of f at value[index], with relative and absolute slack suited to double.
inline void expect_gradient(const std::function<double()>& f, double* value, size_t index, double analytic,
                            const std::string& what, double step = 1e-6) {
  const double saved = value[index];
  value[index] = saved + step;
  const double up = f();
  value[index] = saved - step;
  const double down = f();
  value[index] = saved;
  const double numeric = (up - down) / (2 * step);
  const double scale = std::max({1.0, std::fabs(numeric), std::fabs(analytic)});
  EXPECT_NEAR(analytic, numeric, 1e-6 * scale) << what << " [" << index << "]";
}

// Checks every element of a tensor, or `samples` random ones when it is larger.
inline void check_tensor(const std::function<double()>& f, double* value, const double* analytic, size_t count,
                         const std::string& what, Random& random, size_t samples = 200) {
  if (count <= samples) {
    for (size_t i = 0; i < count; ++i) expect_gradient(f, value, i, analytic[i], what);
  } else {
    for (size_t s = 0; s < samples; ++s) {
      const size_t i = random.below(count);
      expect_gradient(f, value, i, analytic[i], what);
    }
  }
}

inline std::vector<double> random_vector(size_t count, Random& random, double scale = 1.0) {
  std::vector<double> v(count);
  for (double& x : v) x = random.uniform(-scale, scale);
  return v;
}

// A random CSR batch; identifiers empty with probability 0.3, else 1..5 ids.
inline Batch random_batch(int batch_size, int seq_len, int vocab, int labels, Random& random) {
  Batch batch;
  batch.size = batch_size;
  batch.seq_len = seq_len;
  batch.identifier_offsets.push_back(0);
  for (int p = 0; p < batch_size * seq_len; ++p) {
    const int count = random.uniform() < 0.3 ? 0 : 1 + static_cast<int>(random.below(5));
    for (int j = 0; j < count; ++j) batch.identifier_ids.push_back(static_cast<int32_t>(random.below(vocab)));
    batch.identifier_offsets.push_back(static_cast<int32_t>(batch.identifier_ids.size()));
    batch.cur_word_ids.push_back(static_cast<int32_t>(random.below(vocab)));
  }
  for (int b = 0; b < batch_size; ++b) {
    batch.labels.push_back(static_cast<int32_t>(random.below(labels)));
    batch.sample_indices.push_back(b);
  }
  return batch;
}

}  // namespace enhanced::testing
