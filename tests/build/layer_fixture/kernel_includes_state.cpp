// Must not compile against the kernel layer's include root: the state layer is above the kernel.
#include "cpattn/attention.h"

int main() { return 0; }
