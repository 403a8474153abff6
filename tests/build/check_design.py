#!/usr/bin/python3
"""The contract document against the build (docs/design.md sections 2, 3 and 5.7).

Checks that
  - the layer table of section 2 (layer | uses | contents | public headers) names exactly the
    layers, dependencies and public headers of cmake/layers.cmake;
  - every header in include/cpattn/ (version.h from version.h.in) is in that table;
  - the "**Subcommands:**" line of section 2 names exactly the subcommands `cpattn --help` lists;
  - the "**paths:**" list of section 3 names exactly the rows of the ISA table (CPATTN_ISA_TABLE
    in include/cpattn/isa.h), in its order;
  - the tag-stream table of section 5.7 has exactly the values of enum TagStream
    (src/cp/ring_detail.h).
Prints each difference and exits 1 if there is any.
Usage: check_design.py SOURCE_DIR CPATTN_BINARY [--design FILE]  (FILE instead of docs/design.md)
"""
import pathlib
import re
import subprocess
import sys


def cmake_list(text, name):
    m = re.search(r"set\(" + re.escape(name) + r"((?:\s+[^\s()]+)*)\s*\)", text)
    if m is None:
        return None
    return m.group(1).split()


def section(text, title):
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:end if end >= 0 else len(text)]


def ticked(cell):
    return re.findall(r"`([^`]+)`", cell)


def bold_list(text, label, item):
    """The ticked items (each matching `item`) of the list that follows **label** in text."""
    m = re.search(r"\*\*" + re.escape(label) + r"\*\*((?:\s*`" + item + r"`,?)+)", text)
    return ticked(m.group(1)) if m else []


def compare(problems, doc_says, documented, code_says, actual):
    """Records "<doc_says> <documented>, <code_says> <actual>" when the two differ."""
    if documented != actual:
        problems.append(f"{doc_says} {documented}, {code_says} {actual}")


def main(argv):
    root = pathlib.Path(argv[1])
    cpattn = argv[2]
    design_path = pathlib.Path(argv[argv.index("--design") + 1]) if "--design" in argv \
        else root / "docs/design.md"
    design = design_path.read_text()
    layers_cmake = (root / "cmake/layers.cmake").read_text()
    problems = []

    # Section 2: the layer table.
    sec2 = section(design, "## 2. ")
    table = {}
    for line in sec2.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"`[a-z]+`", cells[0]):
            layer = cells[0].strip("`")
            table[layer] = (sorted(ticked(cells[1])), sorted(ticked(cells[3])))
    layers = cmake_list(layers_cmake, "CPATTN_LAYERS") or []
    compare(problems, "design.md section 2 lists layers", sorted(table), "cmake/layers.cmake",
            sorted(layers))
    for layer in layers:
        deps = sorted(cmake_list(layers_cmake, f"CPATTN_LAYER_{layer}_DEPS") or [])
        headers = sorted(cmake_list(layers_cmake, f"CPATTN_LAYER_{layer}_HEADERS") or [])
        doc_deps, doc_headers = table.get(layer, ([], []))
        compare(problems, f"layer {layer}: design.md says it uses", doc_deps,
                "cmake/layers.cmake", deps)
        compare(problems, f"layer {layer}: design.md lists headers", doc_headers,
                "cmake/layers.cmake", headers)
    listed = {h for _, hs in table.values() for h in hs}
    include = root / "include/cpattn"
    on_disk = {str(p.relative_to(include)).removesuffix(".in")
               for p in include.rglob("*") if p.name.endswith((".h", ".h.in"))}
    for h in sorted(on_disk - listed):
        problems.append(f"include/cpattn/{h} is in no layer of design.md section 2")
    for h in sorted(listed - on_disk):
        problems.append(f"design.md section 2 lists {h}, which is not in include/cpattn/")

    # Section 2: the subcommands.
    documented = sorted(bold_list(sec2, "Subcommands:", "[a-z]+"))
    help_text = subprocess.run([cpattn, "--help"], capture_output=True, text=True,
                               check=False).stdout
    listing = help_text.split("Subcommands:", 1)[1] if "Subcommands:" in help_text else ""
    actual = sorted(re.findall(r"^  ([a-z]+)\s", listing, re.MULTILINE))
    if not actual:
        problems.append("`cpattn --help` lists no subcommands")
    compare(problems, "design.md section 2 names subcommands", documented, "`cpattn --help`",
            actual)

    # Section 3: the paths of the ISA table.
    sec3 = section(design, "## 3. ")
    doc_paths = bold_list(sec3, "paths:", "[a-z0-9_]+")
    isa_header = (root / "include/cpattn/isa.h").read_text()
    macro = re.search(r"#define CPATTN_ISA_TABLE\(X, F\)((?:[^\n]*\\\n)*[^\n]*)", isa_header)
    table_paths = re.findall(r"X\(\s*k\w+\s*,\s*(\w+)\s*,", macro.group(1)) if macro else []
    if not table_paths:
        problems.append("include/cpattn/isa.h: no CPATTN_ISA_TABLE rows found")
    compare(problems, "design.md section 3 names paths", doc_paths, "the ISA table", table_paths)

    # Section 5.7: the tag streams.
    sec57 = section(design, "### 5.7 ")
    doc_streams = sorted(int(x) for x in re.findall(r"^\| (\d+) \|", sec57, re.MULTILINE))
    ring_detail = (root / "src/cp/ring_detail.h").read_text()
    enum = re.search(r"enum class TagStream \{(.*?)\};", ring_detail, re.DOTALL)
    code_streams = sorted(int(x) for x in re.findall(r"= (\d+),", enum.group(1))) if enum else []
    if not code_streams:
        problems.append("src/cp/ring_detail.h: no enum TagStream found")
    compare(problems, "design.md section 5.7 lists tag streams", doc_streams, "TagStream has",
            code_streams)

    for p in problems:
        print(p)
    print(f"check_design: {len(table)} layers, {len(listed)} headers, {len(actual)} subcommands, "
          f"{len(table_paths)} ISA paths, {len(code_streams)} tag streams checked, "
          f"{len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
