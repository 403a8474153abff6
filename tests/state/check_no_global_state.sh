#!/bin/sh
# Fails (exit 1, printing the lines) when a C++ source under DIR declares a static or thread_local
# container or a static ForwardResult/Tensor: forward state must flow explicitly (the bug class
# cpattn exists to prevent; docs/design.md section 6). constexpr constants hold no state and are
# not reported. Usage: check_no_global_state.sh DIR
pattern='^[[:space:]]*(static|thread_local)[[:space:]]+[^()]*(std::(vector|deque|stack|queue|map|unordered_map|multimap|set|unordered_set|list|forward_list|array|optional|any)|ForwardResult|Tensor)\b'
found=$(grep -R -n -E --include='*.h' --include='*.cpp' "$pattern" "$1" |
        grep -v -E '^[^:]*:[0-9]+:[[:space:]]*static constexpr ')
if [ -n "$found" ]; then
  printf '%s\n' "$found"
  echo "check_no_global_state: static or thread-local state found (above)"
  exit 1
fi
echo "check_no_global_state: none in $1"
