// enhanced-train's flags, defined once: the app parses them from its command line, the Python
// extension (Model.fit) from the words it builds of the user's keyword arguments, so both get the
// same names, defaults, checks and TrainOptions.
#pragma once

#include <string>

#include "app.h"
#include "enhanced/train_options.h"

namespace enhanced {

struct TrainFlags {
  TrainOptions options;
  EngineFlags engine;  // resolved by the caller into options.engine (resolve_engine_flags), once
};

// Adds every enhanced-train flag to `app`, each writing into `flags`.
void add_train_flags(CLI::App& app, TrainFlags& flags);

// After a successful parse: the flags given (a resume checks them) and the label names read;
// --data is required unless --resume.
void finish_train_flags(const CLI::App& app, TrainFlags& flags);

}  // namespace enhanced
