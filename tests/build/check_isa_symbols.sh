#!/bin/sh
# The kernel's per-ISA copies must not share code with each other or with the baseline library:
# an inline function or template instance (std::min<float>, std::vector<T>::operator[], ...)
# compiled with -mavx512f and emitted as a weak symbol could be the one the linker keeps for
# every caller, and a CPU without AVX-512 would then fault in baseline code. So every global or
# weak function an ISA object defines (nm types T, W, i: code; data holds no instructions) must
# lie in its own namespace cpattn::detail::<isa> (docs/design.md section 3). A function template's
# instance demangles with its return type first ("void cpattn::detail::avx2::f<true>(...)").
# Usage: check_isa_symbols.sh NM ISA "OBJECT..."
nm="$1"
isa="$2"
shift 2
bad=$(for o in $*; do "$nm" --defined-only -C "$o" | awk '$2 ~ /^[TWi]$/ { $1 = ""; $2 = ""; print }'; done |
      sed 's/^ *//' | grep -Ev "^([^ (<]+ )?cpattn::detail::$isa::" | sort -u)
if [ -n "$bad" ]; then
  printf '%s\n' "$bad"
  echo "check_isa_symbols: $isa objects define shared symbols outside cpattn::detail::$isa (above)"
  exit 1
fi
echo "check_isa_symbols: $isa: every shared symbol is in cpattn::detail::$isa"
