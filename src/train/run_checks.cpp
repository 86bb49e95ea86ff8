#include "train/run_checks.h"

#include <algorithm>

#include "enhanced/common.h"
#include "enhanced/device.h"
#include "enhanced/evaluate.h"
#include "enhanced/memory.h"

namespace enhanced {

void check_run_datasets(const TrainOptions& o, const Dataset& train, const Dataset* valid) {
  check_has_samples(train, "--data");
  if (train.num_samples() < o.batch_size)
    fail(train.path(), ": ", train.num_samples(), " samples, fewer than --batch-size ", o.batch_size,
         " (every step would be one partial batch); give --batch-size ", train.num_samples(), " or less");
  if (valid) check_has_samples(*valid, "--valid");
}

RawTableShape raw_table_shape(const TrainOptions& o, const Dataset& train, const Dataset* valid) {
  const int64_t largest = std::max<int64_t>(train.max_model_token_id(), valid ? valid->max_model_token_id() : -1);
  return RawTableShape{o.embedding_dim, o.vocab_size, std::max<int64_t>(largest + 1, 1)};
}

void check_run_memory(const ModelConfig& config, const TrainOptions& o, uint64_t resident) {
  check_model_fits_memory(config, &o.optimizer, o.batch_size, resolve_device(o.device, false), resident);
}

}  // namespace enhanced
