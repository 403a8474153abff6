// Must not compile against the kernel layer's include root: another area's private header.
#include "cp/ring_detail.h"

int main() { return 0; }
