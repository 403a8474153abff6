// The linked library's version (version.h).
#include "cpattn/version.h"

namespace cpattn {

const char* library_version() noexcept { return CPATTN_VERSION_STRING; }

bool library_built_native() noexcept {
#ifdef CPATTN_BUILT_NATIVE
  return true;
#else
  return false;
#endif
}

}  // namespace cpattn
