#!/usr/bin/python3
"""The include rule (docs/design.md section 2): no code includes another area's private headers.

A quoted include "A/x.h" names a header of area A when src/A/x.h exists. It is allowed from
  - src/A/ itself and tests/A/ (an area and its own tests see its private headers);
  - anywhere, when "A/x.h" is one of the interface headers of A's target, given on the command
    line as --interface A/x.h ... (the CPATTN_*_INTERFACE lists of src/CMakeLists.txt).
Everything else (src/B/, bench/, tests/B/, tests/support/) must use include/cpattn/ or those
interface headers. Prints each violation as file:line and exits 1 if there is any.
Usage: check_includes.py SOURCE_DIR [--interface HEADER ...]
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')


def main(argv):
    root = pathlib.Path(argv[1])
    interface = set(argv[argv.index("--interface") + 1:]) if "--interface" in argv else set()
    src = root / "src"
    areas = {p.name for p in src.iterdir() if p.is_dir()}
    violations = []
    checked = 0
    for top in ("src", "tests", "bench"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".h", ".cpp") or not path.is_file():
                continue
            rel = path.relative_to(root)
            own = rel.parts[1] if top in ("src", "tests") and len(rel.parts) > 2 else None
            for n, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                area, name = m.groups()
                if area not in areas or not (src / area / name).is_file():
                    continue  # a public header (cpattn/...) or a test-local one
                checked += 1
                header = f"{area}/{name}"
                if area == own or header in interface:
                    continue
                violations.append(f"{rel}:{n}: includes {header}, a private header of src/{area}/")
    for v in violations:
        print(v)
    print(f"check_includes: {checked} includes of src/ headers checked, "
          f"{len(violations)} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
