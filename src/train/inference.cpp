#include "enhanced/inference.h"

#include <algorithm>
#include <limits>

#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/cpu.h"
#include "enhanced/label_names.h"
#include "enhanced/memory.h"
#include "enhanced/safetensors.h"

namespace enhanced {

ParameterBuffer<float> load_model_for_data(const std::string& checkpoint, const ModelFlags& flags, const Dataset& data,
                                           bool labels_used, std::vector<std::string>* label_names) {
  BareModelChoice bare;
  if (!flags.blend.empty()) bare.blend = parse_blend_mode(flags.blend);
  if (!flags.pool.empty()) bare.pool = parse_pool_mode(flags.pool);
  bare.seq_len = data.seq_len();
  const SafetensorsReader file(checkpoint);
  const bool has_metadata = has_model_metadata(file);
  ParameterBuffer<float> params = read_checkpoint(file, bare);
  const ModelConfig& c = params.config;
  const auto conflict = [&](const char* flag, const std::string& value, const char* saved) {
    check_flag_matches_model(flag, !value.empty(), value, saved, checkpoint);
  };
  conflict("--blend", flags.blend, to_string(c.blend));
  conflict("--pool", flags.pool, to_string(c.pool));
  if (data.seq_len() != c.seq_len)
    fail(data.path(), ": T = ", data.seq_len(), " but ", checkpoint, " was trained with T = ", c.seq_len,
         has_metadata ? "" : " (without metadata, T is dense.weight's columns under feature pooling: --pool time?)");
  data.check_fits_model(c.vocab_size, labels_used ? c.num_labels : std::numeric_limits<int>::max());
  if (label_names) *label_names = checkpoint_label_names(file, c.num_labels);
  return params;
}

InferenceEngine make_inference_engine(ParameterBuffer<float>& params, const Dataset& data, int batch_size,
                                      const EngineChoice& engine) {
  InferenceEngine out;
  const int threads = configure_cpu_threads(engine.threads);
  out.batch = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(batch_size, data.num_samples())));
  check_model_fits_memory(params.config, nullptr, out.batch, engine.device, params.size() * sizeof(float));
  out.engine = make_engine(engine.device, params, nullptr, engine_options(engine, out.batch, threads));
  return out;
}

}  // namespace enhanced
