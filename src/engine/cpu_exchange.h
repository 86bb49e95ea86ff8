// The gradient exchange of a data-parallel CPU step: after each rank's backward over its part
// of the batch, every rank holds the gradient of the whole batch (the same bits on each), by the
// rule of steps/gradient_exchange_steps.h (the CUDA engine's exchange over NCCL, cuda_exchange.h,
// follows it too).
#pragma once

#include <cstdint>
#include <vector>

#include "enhanced/communicator.h"
#include "enhanced/model.h"

namespace enhanced {

class CpuGradientExchange {
 public:
  // grads: in, this rank's gradient (zero outside the dense part and `rows`); out, the sum over
  // the ranks. The dense part (everything after the embedding table, one buffer) is all-reduced;
  // the embedding's touched rows travel as ids and rows (O(batch), never V x D), added in rank
  // order. rows: in, this rank's sorted touched rows; out, the sorted union over the ranks.
  void run(ParameterBuffer<float>& grads, std::vector<int32_t>& rows, Communicator& communicator);

 private:
  std::vector<float> mine_, all_values_;
  std::vector<int32_t> all_ids_;
  std::vector<int> id_counts_, value_counts_;
};

}  // namespace enhanced
