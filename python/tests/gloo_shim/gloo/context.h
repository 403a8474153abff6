// One of the gloo headers torch's ProcessGroupGloo.hpp includes: see gloo/cpattn_shim.h.
#pragma once

#include "gloo/cpattn_shim.h"
