#!/usr/bin/env python3
"""Writes a man page (roff, man macros) from a program's --help output.

Run at build time for each installed program (packaging/install.cmake):

    man-from-help.py --program build/ternd --name ternd \
        --summary "the tern message broker daemon" --version 0.1.0 -o ternd.1

The help text is read as tern's programs write it:
  - the first line, "usage: ...", is the SYNOPSIS;
  - unindented lines up to the first heading are the DESCRIPTION;
  - an unindented line ending in ':' is a heading; the text under the
    first one and the headings after it go into OPTIONS as subsections,
    and a heading named like a man section (Environment, Commands, Files,
    Exit status) becomes that section;
  - an indented line at an item's indent is an item's tag ("--name ...");
    if it has a gap of two or more spaces, the words after the gap begin
    its description (the one-line style of tern-bench); lines indented
    deeper continue the description.
With --subcommands (ternctl), each command under a "Commands:" heading is
run as `PROGRAM COMMAND --help` too, and its text goes into a COMMAND HELP
section as printed (less the lines it shares with the end of the program's
own --help: the global flags). Standard library only; exit status 1 with a
message when any --help fails or prints nothing to read.
"""
import argparse
import os
import re
import subprocess
import sys

MAN_SECTIONS = {"environment": "ENVIRONMENT", "commands": "COMMANDS", "files": "FILES",
                "exit status": "EXIT STATUS", "examples": "EXAMPLES"}


def roff(text):
    """Escape text for roff: backslashes, hyphens (as minus signs, which is
    what a reader types), and a leading control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text


def tag(text):
    """An item's tag: the option in bold, its argument words in italics."""
    words = text.split(" ")
    out = []
    for i, w in enumerate(words):
        if i == 0 or w.startswith("-"):
            out.append("\\fB" + roff(w) + "\\fR")
        else:
            out.append(roff(w))
    return " ".join(out)


def command_names(help_text):
    """The commands listed under a "Commands:" heading (first word of each
    item at its indent)."""
    names = []
    inside = None
    for line in help_text.split("\n"):
        if line and not line.startswith(" "):
            inside = line.strip().lower() == "commands:"
            continue
        if inside and line.strip():
            indent = len(line) - len(line.lstrip(" "))
            if inside is True:
                inside = indent
            if indent == inside:
                names.append(line.split()[0])
    return names


def without_common_tail(text, top):
    """text less the lines it ends with that top ends with too (the global
    flags every command's help repeats)."""
    a, b = text.rstrip("\n").split("\n"), top.rstrip("\n").split("\n")
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    kept = a[:len(a) - n] if n >= 2 else a
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept)


def convert(help_text, name, summary, version, see_also, subcommands=()):
    lines = help_text.rstrip("\n").split("\n")
    if not lines or not lines[0].lower().startswith("usage:"):
        raise ValueError("--help does not begin with a usage: line")
    usage = [lines[0][len("usage:"):].strip()]
    i = 1
    # Usage continuation lines: indented, before the first blank line, and
    # not an option (tern-bench lists its options right under usage:).
    while (i < len(lines) and lines[i].startswith(" ") and lines[i].strip()
           and not lines[i].strip().startswith("-")):
        usage.append(lines[i].strip())
        i += 1
    out = [f'.TH {name.upper()} 1 "" "tern {version}" "tern manual"',
           ".SH NAME", f"{roff(name)} \\- {roff(summary)}",
           ".SH SYNOPSIS", ".nf", *[roff(u) for u in usage], ".fi"]
    section = None     # the current .SH
    item_indent = None  # indent of the current item's tag, or None
    paragraph_open = False

    def open_section(title):
        nonlocal section, item_indent
        out.append(f".SH {title}")
        section = title
        item_indent = None

    for line in lines[i:]:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if not stripped:
            paragraph_open = False
            item_indent = None if indent == 0 else item_indent
            continue
        if indent == 0 and stripped.endswith(":") and len(stripped) < 100:
            title = stripped[:-1]
            std = MAN_SECTIONS.get(title.lower())
            if std is not None:
                open_section(std)
            else:
                if section != "OPTIONS":
                    open_section("OPTIONS")
                out.append(f".SS {roff(title)}")
            item_indent = None
            paragraph_open = False
            continue
        if indent == 0:
            if section is None:
                open_section("DESCRIPTION")
            if not paragraph_open:
                out.append(".PP")
                paragraph_open = True
            out.append(roff(stripped))
            continue
        if section in (None, "DESCRIPTION"):
            open_section("OPTIONS")
        if item_indent is not None and indent > item_indent:
            out.append(roff(stripped))
            continue
        item_indent = indent
        m = re.match(r"(\S.*?\S)\s{2,}(\S.*)$", stripped)
        head, rest = (m.group(1), m.group(2)) if m else (stripped, None)
        out.append(".TP")
        out.append(tag(head))
        if rest is not None:
            out.append(roff(rest))
    for command, text in subcommands:
        if command == subcommands[0][0]:
            out.append(".SH COMMAND HELP")
            out.append(f"What \\fB{roff(name)} \\fIcommand\\fB \\-\\-help\\fR prints for each "
                       "command (the global flags above apply to all).")
        out.append(f".SS {roff(name)} {roff(command)}")
        out.append(".nf")
        out += [roff(ln) if ln.strip() else "" for ln in text.split("\n")]
        out.append(".fi")
    if see_also:
        out.append(".SH SEE ALSO")
        out.append(", ".join(f"\\fB{roff(s)}\\fR(1)" for s in see_also))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", required=True, help="the built program to run with --help")
    ap.add_argument("--name", required=True)
    ap.add_argument("--summary", required=True, help="the NAME line's description")
    ap.add_argument("--version", required=True)
    ap.add_argument("--see-also", default="", help="comma-separated program names")
    ap.add_argument("--subcommands", action="store_true",
                    help="also run `PROGRAM COMMAND --help` for every command under its "
                         "Commands: heading and add each one's text")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    try:
        r = subprocess.run([args.program, "--help"], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin"})
    except OSError as e:
        sys.exit(f"man-from-help: cannot run {args.program}: {e}")
    if r.returncode != 0 or not r.stdout.strip():
        sys.exit(f"man-from-help: {args.program} --help exited {r.returncode} with "
                 f"{len(r.stdout)} bytes on stdout: {r.stderr.strip()}")
    see = [s for s in args.see_also.split(",") if s and s != args.name]
    subcommands = []
    if args.subcommands:
        names = command_names(r.stdout)
        if not names:
            sys.exit(f"man-from-help: {args.program} --help lists no commands under Commands:")
        for command in names:
            sub = subprocess.run([args.program, command, "--help"], capture_output=True,
                                 text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
            if sub.returncode != 0 or not sub.stdout.strip():
                sys.exit(f"man-from-help: {args.program} {command} --help exited "
                         f"{sub.returncode}: {sub.stderr.strip()}")
            subcommands.append((command, without_common_tail(sub.stdout, r.stdout)))
    try:
        page = convert(r.stdout, args.name, args.summary, args.version, see, subcommands)
    except ValueError as e:
        sys.exit(f"man-from-help: {args.program}: {e}")
    with open(args.output + ".tmp", "w") as f:
        f.write(page)
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
