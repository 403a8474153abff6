// Compiles against the kernel layer's include root: its own private headers and the public
// headers of the layers below it are there (the control of the layer-rule tests).
#include "cpattn/kernel.h"
#include "cpattn/rng.h"
#include "kernel/tile_plan.h"

int main() { return 0; }
