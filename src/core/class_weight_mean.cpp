// --class-weight-mean's names (enhanced/class_weight_mean.h).
#include "enhanced/class_weight_mean.h"

namespace enhanced {

const EnumNames<ClassWeightMean>& class_weight_means() {
  static const EnumNames<ClassWeightMean> table{{ClassWeightMean::weights, "weights"},
                                                {ClassWeightMean::batch, "batch"}};
  return table;
}

ClassWeightMean parse_class_weight_mean(const std::string& name) {
  return parse_flag_value(class_weight_means(), name, "--class-weight-mean");
}

const char* to_string(ClassWeightMean mean) { return name_of(class_weight_means(), mean); }

}  // namespace enhanced
