// Model checkpoints: safetensors with the contract's tensor names (torch load_state_dict takes them
// as they are) and the hyper-parameters in __metadata__, so a checkpoint alone rebuilds the model.
#pragma once

#include <map>
#include <string>

#include "enhanced/model.h"
#include "enhanced/safetensors.h"

namespace enhanced {

void save_checkpoint(const std::string& path, const ParameterBuffer<float>& params,
                     const std::map<std::string, std::string>& extra_metadata = {});
ModelConfig checkpoint_config(const SafetensorsReader& file);

// A safetensors file without the engine's metadata (PyTorch's save_file(model.state_dict())) is
// read when its tensors' shapes determine the model: V, D from embedding.weight (V, D), H from
// lstm.weight_hh_l0 (4H, H), L from dense.weight (L, F), and F = T (feature pooling) or 2H (time
// pooling). The rest comes from here: the blend and pool (flags), and T with time pooling (the
// data's: no tensor holds it).
struct BareModelChoice {
  BlendMode blend = BlendMode::mean;
  PoolMode pool = PoolMode::feature;
  int seq_len = 0;  // needed with time pooling
};
// Whether the file holds the engine's model metadata (any of its keys): else it is read as bare.
bool has_model_metadata(const SafetensorsReader& file);
// The model of a bare file; errors name the tensors and both numbers of a mismatch, and every
// missing or unknown tensor.
ModelConfig bare_checkpoint_config(const SafetensorsReader& file, const BareModelChoice& choice);

// Loads and checks names, shapes and that every value is finite. A file without the engine's
// metadata is read as bare, with `bare`'s choices.
ParameterBuffer<float> load_checkpoint(const std::string& path, const BareModelChoice& bare = {});
ParameterBuffer<float> read_checkpoint(const SafetensorsReader& file, const BareModelChoice& bare = {});

// The model's tensors (names prefixed) and hyper-parameters, into or out of any safetensors file:
// the training state file carries the weights too, so it alone resumes a run.
void add_model(SafetensorsWriter& writer, const ParameterBuffer<float>& params, const std::string& prefix = "");
ParameterBuffer<float> read_model(const SafetensorsReader& file, const std::string& prefix = "");
// A metadata value that must be an integer; errors name the file and the key.
int64_t metadata_integer(const SafetensorsReader& file, const std::string& key);

// A batch as safetensors (identifier_offsets, identifier_ids, cur_word_ids, labels; I32), the
// form tests/reference/ and the bench peers read.
struct Batch;
void save_batch(const std::string& path, const Batch& batch);

}  // namespace enhanced
