// What the class-weighted training loss divides its weighted sum by (--class-weight-mean;
// docs/model.md "Loss"): `weights`, the batch's total class weight, sum_b w[y_b] (torch's
// CrossEntropyLoss(weight=w), the default); `batch`, the batch's sample count B (Keras'
// class_weight: per-sample weights w[y_b] under its "sum_over_batch_size" reduction, which
// Model.fit's class_weight asks for). The arithmetic is steps/softmax_xent_steps.h's.
#pragma once

#include <string>

#include "enhanced/enum_names.h"

namespace enhanced {

enum class ClassWeightMean { weights, batch };

// Their names (enhanced/enum_names.h): "weights", "batch".
const EnumNames<ClassWeightMean>& class_weight_means();
// ClassWeightMean from its name (Error "--class-weight-mean must be ..." otherwise).
ClassWeightMean parse_class_weight_mean(const std::string& name);
const char* to_string(ClassWeightMean mean);

}  // namespace enhanced
