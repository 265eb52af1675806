#!/usr/bin/env python3
"""Checks the launcher's contract (include/ddp/dist/launch_env.h) against the code and the docs.

1. Every declared variable is in kAll, once.
2. No source file in include/, src/ or tools/ but launch_env.{h,cpp} spells a declared variable's name as a string
   literal ("RANK", or "RANK=" as a lookup key), and every getenv/setenv/unsetenv of a literal names a variable
   of POSIX's own (HOME, PATH, TMPDIR): the others are read through the table.
3. docs/launcher.md's table of the ranks' environment ("| variable | value |") names exactly the variables ddprun
   sets (kDdprun), and every declared variable appears somewhere in docs/ or README.md.

Usage: check-launch-env.py [ROOT]   (exit 1 naming each finding; --self-test checks the checks)
"""
import os
import re
import sys

POSIX = {"HOME", "PATH", "TMPDIR"}
DECL = re.compile(r'inline constexpr EnvVar (k\w+)\s*=\s*var\("([A-Za-z_0-9]+)",\s*Type::\w+,\s*([^,]+),', re.S)
ALL = re.compile(r"kAll\[\]\s*=\s*\{([^}]*)\}", re.S)
LITERAL = re.compile(r'"([A-Za-z_][A-Za-z_0-9]*)=?"')
GETENV = re.compile(r'\b(?:std::)?(?:getenv|setenv|unsetenv)\(\s*"([^"]*)"')
DOC_ROW = re.compile(r"^\|\s*(`[^|]*`)\s*\|")


def declarations(header_text):
    decls = {}  # constant -> (name, set_by)
    for constant, name, set_by in DECL.findall(header_text):
        decls[constant] = (name, set_by.strip())
    listed = re.findall(r"&(k\w+)", ALL.search(header_text).group(1)) if ALL.search(header_text) else []
    return decls, listed


def check_table(decls, listed):
    problems = []
    for constant in decls:
        if listed.count(constant) != 1:
            problems.append(f"launch_env.h: {constant} is listed {listed.count(constant)} times in kAll (once)")
    for constant in listed:
        if constant not in decls:
            problems.append(f"launch_env.h: kAll lists {constant}, which is not declared with var(...)")
    return problems


def check_source(path, text, names):
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("//", 1)[0]
        for name in LITERAL.findall(code):
            if name in names:
                problems.append(f'{path}:{n}: "{name}" spelled out; read it through ddp::launch_env '
                                f"(include/ddp/dist/launch_env.h)")
        for name in GETENV.findall(code):
            if name not in POSIX and name not in names:
                problems.append(f"{path}:{n}: getenv(\"{name}\"): declare {name} in include/ddp/dist/launch_env.h")
    return problems


def doc_table_names(doc_text):
    """The variables named in the rows of the table under the '| variable | value |' header."""
    out, inside = set(), False
    for line in doc_text.splitlines():
        if line.startswith("| variable | value |"):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            m = DOC_ROW.match(line)
            if m:
                out.update(re.findall(r"`([A-Za-z_0-9]+)`", m.group(1)))
    return out


def check_docs(decls, launcher_md, all_docs):
    problems = []
    by_ddprun = {name for name, set_by in decls.values() if "kDdprun" in set_by}
    documented = doc_table_names(launcher_md)
    for name in sorted(by_ddprun - documented):
        problems.append(f"docs/launcher.md: ddprun sets {name} (launch_env.h), but the ranks' environment table "
                        "has no row for it")
    for name in sorted(documented - by_ddprun):
        problems.append(f"docs/launcher.md: the ranks' environment table lists {name}, which launch_env.h does not "
                        "declare as set by ddprun (kDdprun)")
    for name, _ in decls.values():
        if name not in all_docs:
            problems.append(f"docs: {name} (launch_env.h) is mentioned in no file of docs/ or README.md")
    return problems


def sources(root):
    for top in ("include", "src", "tools"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".cpp", ".h")) and not f.startswith("launch_env."):
                    yield os.path.join(d, f)


def run(root):
    header = open(os.path.join(root, "include/ddp/dist/launch_env.h")).read()
    decls, listed = declarations(header)
    if len(decls) < 10:
        return [f"launch_env.h: found only {len(decls)} declarations; the pattern no longer matches the header"]
    problems = check_table(decls, listed)
    names = {name for name, _ in decls.values()}
    for path in sources(root):
        problems += check_source(os.path.relpath(path, root), open(path, errors="replace").read(), names)
    docs = ""
    for d, _, files in os.walk(os.path.join(root, "docs")):
        docs += "".join(open(os.path.join(d, f)).read() for f in files if f.endswith(".md"))
    docs += open(os.path.join(root, "README.md")).read()
    problems += check_docs(decls, open(os.path.join(root, "docs/launcher.md")).read(), docs)
    return problems


def self_test():
    header = ('inline constexpr EnvVar kRank = var("RANK", Type::kCount, kDdprun, "r");\n'
              'inline constexpr EnvVar kTimeline = var("DDP_TIMELINE", Type::kText, kUser, "t");\n'
              "inline constexpr const EnvVar* kAll[] = {&kRank};\n")
    decls, listed = declarations(header)
    assert decls == {"kRank": ("RANK", "kDdprun"), "kTimeline": ("DDP_TIMELINE", "kUser")}, decls
    assert any("kTimeline is listed 0 times" in p for p in check_table(decls, listed))
    names = {"RANK", "DDP_TIMELINE"}
    assert len(check_source("a.cpp", 'x = std::getenv("RANK");', names)) == 1
    assert len(check_source("a.cpp", 'key = "RANK=";', names)) == 1
    assert check_source("a.cpp", 'msg = "RANK is set"; // "RANK"', names) == []
    assert len(check_source("a.cpp", 'getenv("SOMETHING_NEW")', names)) == 1
    assert check_source("a.cpp", 'getenv("HOME")', names) == []
    doc = "| variable | value |\n|---|---|\n| `RANK`, `LOCAL_RANK` | x |\n\nafter `DDP_TIMELINE`\n"
    assert doc_table_names(doc) == {"RANK", "LOCAL_RANK"}
    found = check_docs(decls, doc, doc)
    assert found == ["docs/launcher.md: the ranks' environment table lists LOCAL_RANK, which launch_env.h does not "
                     "declare as set by ddprun (kDdprun)"], found
    assert any("DDP_TIMELINE" in p for p in check_docs(decls, doc, "no mention"))
    print("check-launch-env self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = run(root)
    for p in found:
        print(p)
    if found:
        print(f"check-launch-env: {len(found)} finding(s)")
        sys.exit(1)
    print("check-launch-env: the launcher's contract holds")
