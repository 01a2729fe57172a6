#!/usr/bin/env python3
"""Writes ternd's default configuration file from the built ternd itself, so
it lists every option ternd has, with its default, in --help's groups:

    ternd-conf.py --ternd build/ternd --data-path /var/lib/tern \
        --path /etc/tern/ternd.conf -o ternd.conf

Each option appears as its --help description and range in comments, then
`# name = default` with the value exactly as `ternd --print-config` writes
it (so uncommenting a line changes nothing until its value is edited). The
one line set is data-path. `config` itself is left out (a config file
cannot set it), and so are the nsqd options ternd accepts with no effect.

Fails (exit status 1, naming the options) when --help and --print-config
do not list the same options: a file that missed one would not be
"every option". Standard library only.
"""
import argparse
import os
import re
import subprocess
import sys
import textwrap


def run(ternd, *args):
    # An empty environment: TERN_* variables of the build must not leak in.
    r = subprocess.run([ternd, *args], capture_output=True, text=True, timeout=60, env={})
    if r.returncode != 0:
        sys.exit(f"ternd-conf: {ternd} {' '.join(args)} exited {r.returncode}: "
                 f"{r.stderr.strip()}")
    return r.stdout


def parse_help(text):
    """[(group title, [(name, spec, description)])] from ternd --help, up to
    the nsqd options it ignores."""
    groups = []
    cur = None
    for line in text.split("\n"):
        if line.startswith("nsqd options accepted with no effect"):
            break
        if line and not line.startswith(" ") and line.endswith(":"):
            cur = (line[:-1], [])
            groups.append(cur)
            continue
        m = re.match(r"  --([a-z0-9-]+)\s*(.*)$", line)
        if m and cur is not None:
            cur[1].append([m.group(1), m.group(2), ""])
            continue
        if line.startswith("        ") and cur is not None and cur[1]:
            entry = cur[1][-1]
            entry[2] = (entry[2] + " " + line.strip()).strip()
    return [g for g in groups if g[1]]


def parse_print(text):
    values = {}
    for line in text.split("\n"):
        if " = " in line:
            k, _, v = line.partition(" = ")
            values[k] = v
        elif line.endswith(" ="):
            values[line[:-2]] = ""
    return values


def comment(text, out):
    for ln in textwrap.wrap(text, 76, break_on_hyphens=False):
        out.append("# " + ln)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ternd", required=True)
    ap.add_argument("--data-path", required=True)
    ap.add_argument("--path", required=True, help="where the file is installed (for its header)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    groups = parse_help(run(args.ternd, "--help"))
    values = parse_print(run(args.ternd, "--print-config"))
    version = run(args.ternd, "--version").strip()
    in_help = {name for _, opts in groups for name, _, _ in opts} - {"config"}
    missing = sorted(set(values) ^ in_help)
    if missing:
        sys.exit("ternd-conf: --help and --print-config disagree on these options: "
                 + ", ".join(missing))
    out = [f"# {args.path}: the configuration of ternd, the tern message broker.",
           f"# Written from {version}'s --help and --print-config at build time.",
           "#",
           ]
    comment("One `name = value` per line; `#` begins a comment; text values may be quoted. "
            "Every option is listed below with its default, commented out: remove the `# ` "
            "before a line and edit its value to change it. Precedence, lowest first: "
            "default < this file < TERN_<NAME> environment variables < command-line flags. "
            "`ternd --config FILE --print-config` prints the configuration a start would use; "
            "`ternd --help` and ternd(1) describe every option. The cluster secret never goes "
            "here: name a file holding it with cluster-secret-file, or set TERN_CLUSTER_SECRET.",
            out)
    for title, opts in groups:
        opts = [o for o in opts if o[0] != "config"]
        if not opts:
            continue
        out += ["", "#" * 78, f"# {title}", "#" * 78]
        for name, spec, desc in opts:
            out.append("")
            comment(desc, out)
            # --help's "host:port (default X; range A..B)": the value's
            # form and its range or choices (the default is the line below).
            m = re.match(r"^(.*?)\s*\(default (.*)\)$", spec)
            if m:
                inner = m.group(2)
                rest = inner.split("; ", 1)[1] if "; " in inner else ""
                spec = "; ".join(p for p in (m.group(1), rest) if p)
            if spec:
                comment(spec, out)
            value = values[name]
            line = f"{name} = {value}" if value else f"{name} ="
            if name == "data-path":
                out.append(f"# Built-in default: {line}")
                out.append(f'data-path = "{args.data_path}"')
            else:
                out.append(f"# {line}")
    with open(args.output + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
