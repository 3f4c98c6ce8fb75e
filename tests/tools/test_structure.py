"""The layout's rules, checked on the source tree (docs/architecture.md):

- no product C file (core/, shim/, scripts/, include/) over 900 lines, and
  no product function over 80 lines; no test or simulator C file over 1,200;
- core/ never includes a header of shim/ or scripts/ nor calls a function
  the shim defines (core is the library, the shim its host: core asks the
  host only through core/host.h);
- no circle of product files in core/ or shim/ tied by calls or includes
  (a file includes another when it includes its header, x.h of x.c): no
  include runs back up, and the shim's start-up is reached through the
  hooks init.c gives, never by calling up into it.

Functions are read as the formatter writes them: a definition's body opens
with "{" alone in column 0 and ends with "}" in column 0. A file calls
another when it names a function the other defines without `static`."""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, run_all  # noqa: E402

SRC = os.environ.get("SOURCE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PRODUCT_DIRS = ["core", "shim", "scripts", "include"]
PRODUCT_FILE_MAX, FUNCTION_MAX, TEST_FILE_MAX = 900, 80, 1200


def files(dirs, exts=(".c", ".h")):
    out = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(SRC, d, "**", "*"), recursive=True)):
            if path.endswith(exts) and os.path.isfile(path):
                out.append(path)
    return out


def rel(path):
    return os.path.relpath(path, SRC)


def lines_of(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def strip_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def functions(path):
    """(name, first line, length, is_static) of each function defined in path."""
    lines = strip_comments_and_strings("\n".join(lines_of(path))).split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i] == "{":
            start = i - 1  # the signature: back to the line that opens it
            while start > 0 and lines[start - 1].strip() and not lines[start - 1].startswith(("}", "#")) \
                    and not lines[start - 1].rstrip().endswith((";", "}", "*/")):
                start -= 1
            signature = re.sub(r"__attribute__\s*\(\(.*?\)\)", "static", " ".join(lines[start:i]))
            end = i
            while end < len(lines) and lines[end] != "}" and not lines[end].startswith("} "):
                end += 1
            name = re.findall(r"(\w+)\s*\(", signature)
            if name and "=" not in signature.split("(")[0]:
                is_static = bool(re.match(r"\s*static", signature))
                out.append((name[0], start + 1, end - start + 1, is_static))
            i = end
        i += 1
    return out


def test_product_files_are_at_most_900_lines():
    big = [f"{rel(p)}: {len(lines_of(p)) - 1} lines" for p in files(PRODUCT_DIRS)
           if len(lines_of(p)) - 1 > PRODUCT_FILE_MAX]
    check(not big, "over 900 lines: " + "; ".join(big))


def test_product_functions_are_at_most_80_lines():
    long = [f"{rel(p)}:{line} {name}: {n} lines" for p in files(PRODUCT_DIRS, (".c",))
            for name, line, n, _ in functions(p) if n > FUNCTION_MAX]
    check(not long, "over 80 lines: " + "; ".join(long))


def test_test_and_simulator_files_are_at_most_1200_lines():
    big = [f"{rel(p)}: {len(lines_of(p)) - 1} lines" for p in files(["tests"])
           if len(lines_of(p)) - 1 > TEST_FILE_MAX]
    check(not big, "over 1,200 lines: " + "; ".join(big))


def test_core_includes_nothing_of_the_shim_or_the_scripts():
    core_headers = {os.path.basename(p) for p in files(["core", "include"], (".h", ".def"))}
    above = {os.path.basename(p) for p in files(["shim", "scripts"], (".h", ".def"))} - core_headers
    bad = []
    for p in files(["core"], (".c", ".h", ".def")):
        for n, line in enumerate(lines_of(p), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m and (os.path.basename(m.group(1)) in above or m.group(1).startswith(("../shim", "../scripts"))):
                bad.append(f"{rel(p)}:{n} includes {m.group(1)}")
    check(not bad, "; ".join(bad))


def test_core_calls_nothing_the_shim_defines():
    # A name the shim defines and exports (it interposes libc's syscall,
    # shim/pidfd.c) binds a call from core to the shim: core/sys.h makes
    # such calls to the kernel directly.
    bad = [f"{rel(a)} -> {rel(b)}" for a, dests in call_graph().items() if rel(a).startswith("core/")
           for b in dests if rel(b).startswith("shim/")]
    check(not bad, "core calls into the shim: " + "; ".join(sorted(bad)))


def call_graph():
    """file -> set of files whose non-static functions it names."""
    sources = files(["core", "shim"], (".c",))
    owner = {}
    for p in sources:
        for name, _, _, is_static in functions(p):
            if not is_static:
                owner.setdefault(name, p)
    graph = {}
    for p in sources:
        text = strip_comments_and_strings("\n".join(lines_of(p)))
        names = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", text))
        graph[p] = {owner[n] for n in names if n in owner and owner[n] != p}
    return graph


def dependency_graph():
    """call_graph() plus an edge A -> B where A (or A's header) includes B's
    header: x.h beside x.c, found as the compiler would (the includer's
    folder first)."""
    graph = call_graph()
    headers = {}
    for h in files(["core", "shim", "include"], (".h",)):
        headers.setdefault(os.path.basename(h), []).append(h)

    def owner(header_path):
        c = header_path[:-2] + ".c"
        return c if c in graph else None

    for p in files(["core", "shim"]):
        me = p if p.endswith(".c") else owner(p)
        for line in lines_of(p) if me else []:
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            found = headers.get(os.path.basename(m.group(1)), []) if m else []
            here = [h for h in found if os.path.dirname(h) == os.path.dirname(p)]
            dest = owner((here or found)[0]) if found else None
            if dest and dest != me:
                graph[me].add(dest)
    return graph


def circles(graph):
    """The strongly connected sets of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(rel(g) for g in group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_circle_of_files_that_call_or_include_each_other():
    found = circles(dependency_graph())
    check(not found, f"{len(found)} circles: " + " | ".join(", ".join(c) for c in found))


def shared_structs(text):
    """{struct name: [field names]} of the reg_* structs defined in text (the
    records of the shared segment); a nested union counts as its one field."""
    code = strip_comments_and_strings(text)
    out = {}
    for m in re.finditer(r"^struct (reg_\w+) \{\n(.*?)^\};", code, re.S | re.M):
        body = re.sub(r"(union|struct)\s*\{[^{}]*\}", r"\1", m.group(2))  # a nested union: one field
        names = []
        for decl in body.split(";"):
            decl = re.sub(r"\[[^\]]*\]", "", decl).strip()
            if decl:
                names += [re.findall(r"(\w+)\s*$", part)[0] for part in decl.split(",") if part.strip()]
        out[m.group(1)] = names
    return out


def protocol_table(text):
    """{section: set of field names} of the protocol table at the top of
    registry.h: sections open with "== struct NAME ==" and each row names
    its fields in the first column (up to the first run of two spaces) and
    a blank comment line ends them."""
    comment = text[:text.index("*/")]
    sections, current = {}, None
    for line in comment.split("\n"):
        m = re.match(r"\s*\*\s*== (?:struct )?(.+?) ==", line)
        if m:
            current = sections.setdefault(m.group(1), set())
        elif line.strip() == "*":  # a blank line ends a section
            current = None
        elif current is not None and re.match(r"\s*\*   \S", line):
            first = re.split(r"\s{2,}", line.split("*", 1)[1].strip())[0]
            current.update(n.strip() for n in first.split(","))
    return sections


def test_every_shared_field_is_in_the_protocol_table():
    # registry.h's table is the one description of the lock-free protocol:
    # a field added to a shared struct without its row fails here.
    with open(os.path.join(SRC, "core", "registry.h"), encoding="utf-8") as f:
        text = f.read()
    structs, table = shared_structs(text), protocol_table(text)
    shared = ["reg_header", "reg_holder", "reg_block", "reg_lease"]
    check(all(s in structs for s in shared), f"shared structs found: {sorted(structs)}")
    missing = [f"{s}.{n}" for s in shared for n in structs.get(s, []) if n not in table.get(s, set())]
    check(not missing, "fields without a row in registry.h's protocol table: " + ", ".join(missing))


def test_the_function_reader_sees_every_function():
    # Guards the reader above: if the formatter's style changed, the checks
    # would pass on nothing. core/options.c defines options_parse_bool.
    names = [n for n, _, _, _ in functions(os.path.join(SRC, "core", "options.c"))]
    check("options_parse_bool" in names, f"options_parse_bool not found among {names[:10]}")


if __name__ == "__main__":
    run_all(dict(globals()))
