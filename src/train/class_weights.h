// --class-weights: the training loss's class weights (EngineOptions::class_weights; divided as
// --class-weight-mean says, enhanced/class_weight_mean.h), from the training set's labels or from a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/dataset.h"

namespace enhanced {

// spec "" -> {} (unweighted); "balanced" -> balanced_class_weights of `train`'s labels; anything
// else is a file read by read_class_weights. num_labels: the model's L.
std::vector<float> class_weights_for(const std::string& spec, const Dataset& train, int num_labels);

// scikit-learn's "balanced" rule, w_c = n / (L * count_c) with n = sum of the counts and L =
// counts.size(). A class without a sample gets 0 (scikit-learn refuses such a class): its weight
// could only weigh samples that the training set does not have.
std::vector<float> balanced_class_weights(const std::vector<int64_t>& counts);

// num_labels non-negative finite numbers, separated by whitespace and/or commas. Errors name the
// file, and the line and column of a bad number.
std::vector<float> read_class_weights(const std::string& path, int num_labels);

}  // namespace enhanced
