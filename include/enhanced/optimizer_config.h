// What an optimizer is (SGD with optional momentum, PyTorch semantics; Adam), the rules both
// devices follow (which moments it keeps, which embedding rows a step may skip) and its state:
// the moments and the step count, carved like the parameters (ParameterBuffer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/model.h"

namespace enhanced {

// An optimizer's kind: one a row of optimizers() (below).
enum class OptimizerKind { sgd, adam };
OptimizerKind parse_optimizer_kind(const std::string& text);  // a row's name: "sgd" | "adam"
const char* to_string(OptimizerKind kind);                     // its row's name

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  float learning_rate = 1e-3f;
  float momentum = 0.0f;  // SGD
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-7f;  // Adam (Keras defaults)
  bool lazy_embedding = false;
  float clip_norm = 0.0f;  // global gradient-norm clipping when > 0
  // Weight decay (>= 0): Adam decouples it as torch.optim.AdamW (w *= 1 - lr_t * wd, then the Adam
  // update); SGD adds it to the gradient as torch.optim.SGD(weight_decay=) (g += wd * w after
  // clipping, before momentum). The embedding table decays only with weight_decay_embedding;
  // with lazy updates, only the rows in the batch decay (the others are not visited at all).
  float weight_decay = 0.0f;
  bool weight_decay_embedding = false;

  void validate() const;  // throws Error naming the flag
};

// An optimizer is one row of optimizers(): its name, its moments, its scalars (each with its
// command-line flag), the rate the benchmark trains it at. enhanced-train's flags, the recorded
// run options, validate(), moment_names() and rows_only() iterate the rows; its update (the
// arithmetic both devices run) is the steps/optimizer_steps.h struct of the same kind.

// An OptimizerConfig float field, as a pointer to member.
using OptimizerField = float OptimizerConfig::*;

// A scalar of one optimizer: an OptimizerConfig field, whose initialiser is the flag's default.
struct OptimizerScalar {
  enum class Rule { unit_interval, positive };  // [0, 1), or > 0 and finite
  const char* key;     // in the recorded run options ("momentum")
  const char* flag;    // on the command line ("--momentum")
  const char* help;    // the flag's help ("SGD momentum")
  const char* label;   // what validate()'s error calls it ("momentum", "Adam beta1")
  OptimizerField field;
  Rule rule;
  bool optional = false;  // true for a scalar added after runs were recorded (they lack its key)
};

struct OptimizerInfo {
  OptimizerKind kind;
  const char* name;                        // --optimizer's value, the state file's "optimizer"
  std::vector<const char*> moments;        // the saved state's tensor names, in state order
  // The moments are kept only when this field > 0 (nullptr: always). A step that keeps none
  // must leave a weight with a zero gradient unchanged (rows_only relies on it).
  OptimizerField moments_when;
  std::vector<OptimizerScalar> scalars;    // in flag and run-option order
  float bench_learning_rate;               // enhanced-bench's rate
};

// The rows, in --optimizer's order; optimizer_info(kind) is kind's row.
const std::vector<OptimizerInfo>& optimizers();
const OptimizerInfo& optimizer_info(OptimizerKind kind);
// The rows' names (--optimizer's choices), and as text: "sgd or adam".
std::vector<std::string> optimizer_names();
std::string optimizer_names_text();

// A step's learning rate (a schedule's value) must be >= 0 and finite: throws Error naming the step.
void check_step_learning_rate(float learning_rate, int64_t step);

// Whether a step may visit only the embedding rows named in the batch: lazy updates, or a step
// that keeps no moments (plain SGD), which moves only rows with a gradient (so skipping the rest
// is exact, not lazy) unless the embedding table decays: then every row moves and every row is
// visited.
bool rows_only(const OptimizerConfig& config);

// The moments a step keeps, in state order (its row's moments, or none when its moments_when
// field is 0): SGD with momentum its velocity "m"; Adam "m" and "v"; plain SGD none. The names
// are those of the saved state's tensors.
std::vector<const char*> moment_names(const OptimizerConfig& config);

// Moments (one ParameterBuffer each, moment_names order) and the number of steps taken.
struct OptimizerState {
  OptimizerConfig config;
  int64_t steps = 0;
  std::vector<ParameterBuffer<float>> moments;

  OptimizerState() = default;
  OptimizerState(const OptimizerConfig& optimizer, const ModelConfig& model);  // validates; zero moments
  ParameterBuffer<float>* moment(size_t index) { return index < moments.size() ? &moments[index] : nullptr; }
};

}  // namespace enhanced
