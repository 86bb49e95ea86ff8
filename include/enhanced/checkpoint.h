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
// Loads and checks names, shapes and that every value is finite.
ParameterBuffer<float> load_checkpoint(const std::string& path);

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
