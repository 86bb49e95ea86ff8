#include "enhanced/common.h"

namespace enhanced {

const char* version_string() {
#ifdef ENHANCED_HAVE_CUDA
  return "enhanced " ENHANCED_VERSION " (CPU + CUDA backends)";
#else
  return "enhanced " ENHANCED_VERSION " (CPU backend; built without CUDA)";
#endif
}

}  // namespace enhanced
