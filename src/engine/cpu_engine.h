// The CPU engine (cpu_engine.cpp): the model of cpu_model.h behind Engine, on the caller's
// buffers. Everything else reaches it through make_engine (enhanced/engine.h).
#pragma once

#include <memory>

#include "enhanced/engine.h"
#include "enhanced/model.h"
#include "enhanced/optimizer_config.h"

namespace enhanced {

// The CPU engine: trains the caller's `params` and `optimizer` in place (nullptr: inference only).
std::unique_ptr<Engine> make_cpu_engine(ParameterBuffer<float>& params, OptimizerState* optimizer,
                                        const EngineOptions& options);

}  // namespace enhanced
