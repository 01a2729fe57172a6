#!/usr/bin/env python3
"""Renders the tern Helm chart without helm (Debian 12 does not package
it), for tests/deploy/test_deploy.py and to write deploy/kubernetes/.

Only the subset of Go templates the chart uses is understood, and anything
else fails loudly (exit status 2, the file, line and the action):

  {{ .Values.a.b }}          a value from values.yaml (a missing key fails:
                             helm would print "<no value>" silently)
  {{ .Release.Name }}        the release name (--release, default "tern")
  {{ X | quote }}            X as a double-quoted string
  {{ if X }} ... {{ else }} ... {{ end }}
                             truthiness as in Go templates: false, 0, "",
                             null and empty maps and lists are false
  {{- and -}}                trim the white space (newlines included)
                             before or after the action

Usage:
  render.py CHART [--release NAME] [--set a.b=v ...]       print every template
  render.py CHART --out-dir DIR                            one file per template

Values given with --set are strings, or integers / true / false when they
read as such. Standard library only; the values file is parsed with
python3-yaml.
"""
import argparse
import json
import os
import re
import sys

import yaml

ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.S)
VALUE_REF = re.compile(r"^\.(Values|Release)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)$")


class RenderError(Exception):
    pass


def lookup(expr, ctx, where):
    m = VALUE_REF.match(expr)
    if not m:
        raise RenderError(f"{where}: unsupported expression {expr!r} (only .Values.x.y and "
                          ".Release.Name)")
    root, path = m.group(1), m.group(2).split(".")[1:]
    if root == "Release":
        if path != ["Name"]:
            raise RenderError(f"{where}: only .Release.Name is supported, not {expr!r}")
        return ctx["release"]
    cur = ctx["values"]
    for i, key in enumerate(path):
        if not isinstance(cur, dict) or key not in cur:
            raise RenderError(f"{where}: {expr} is not in the values (no "
                              f"{'.'.join(path[:i + 1])})")
        cur = cur[key]
    return cur


def scalar_text(v, where, expr):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return str(v)
    raise RenderError(f"{where}: {expr} is a {type(v).__name__}, not a scalar (toYaml is not "
                      "supported)")


def evaluate(pipeline, ctx, where):
    stages = [s.strip() for s in pipeline.split("|")]
    if not stages[0]:
        raise RenderError(f"{where}: empty pipeline")
    v = lookup(stages[0], ctx, where)
    for fn in stages[1:]:
        if fn != "quote":
            raise RenderError(f"{where}: unsupported function {fn!r} (only quote)")
        v = json.dumps(scalar_text(v, where, stages[0]))
    return v


def truthy(v):
    return not (v is None or v is False or v == 0 and not isinstance(v, bool)
                or v == "" or v == {} or v == [])


def tokens(text, name):
    """(kind, value, line) with kind "text" or "action", the trim markers
    already applied to the neighbouring text."""
    out = []
    pos = 0
    trim_next = False
    for m in ACTION.finditer(text):
        chunk = text[pos:m.start()]
        if trim_next:
            chunk = chunk.lstrip()
        if m.group(1) == "-":
            chunk = chunk.rstrip()
        out.append(("text", chunk, None))
        line = text.count("\n", 0, m.start()) + 1
        body = m.group(2)
        if "{{" in body:
            raise RenderError(f"{name}:{line}: nested or unterminated action")
        out.append(("action", body.strip(), line))
        trim_next = m.group(3) == "-"
        pos = m.end()
    rest = text[pos:]
    if "{{" in rest or "}}" in rest:
        line = text.count("\n", 0, pos + max(rest.find("{{"), rest.find("}}"))) + 1
        raise RenderError(f"{name}:{line}: unterminated action")
    out.append(("text", rest.lstrip() if trim_next else rest, None))
    return out


def render_text(text, ctx, name):
    # A stack of (emitting, seen_else, line) for open ifs.
    stack = []
    out = []

    def emitting():
        return all(s[0] for s in stack)

    for kind, val, line in tokens(text, name):
        where = f"{name}:{line}"
        if kind == "text":
            if emitting():
                out.append(val)
            continue
        if val.startswith("/*"):
            raise RenderError(f"{where}: template comments are not supported")
        word = val.split(None, 1)[0] if val else ""
        if word == "if":
            arg = val[2:].strip()
            cond = truthy(lookup(arg, ctx, where)) if emitting() else False
            # An if inside a branch not taken is parsed but never emits.
            stack.append([cond, False, line, emitting()])
        elif word == "else":
            if val != "else":
                raise RenderError(f"{where}: only a bare else is supported, not {val!r}")
            if not stack or stack[-1][1]:
                raise RenderError(f"{where}: else without an if")
            top = stack[-1]
            top[1] = True
            outer = all(s[0] for s in stack[:-1])
            top[0] = outer and not top[0] and top[3]
        elif word == "end":
            if val != "end":
                raise RenderError(f"{where}: {val!r}: only a bare end is supported")
            if not stack:
                raise RenderError(f"{where}: end without an if")
            stack.pop()
        elif word in ("range", "with", "define", "template", "include", "block",
                      "toYaml", "nindent", "indent", "default", "tpl") or val.startswith("$"):
            raise RenderError(f"{where}: unsupported action {val!r}")
        else:
            if emitting():
                v = evaluate(val, ctx, where)
                out.append(scalar_text(v, where, val))
    if stack:
        raise RenderError(f"{name}:{stack[-1][2]}: if without an end")
    return "".join(out)


def parse_set(values, item):
    if "=" not in item:
        raise RenderError(f"--set {item!r}: expected key.path=value")
    key, raw = item.split("=", 1)
    if re.fullmatch(r"-?[0-9]+", raw):
        v = int(raw)
    elif raw in ("true", "false"):
        v = raw == "true"
    else:
        v = raw
    path = key.split(".")
    cur = values
    for k in path[:-1]:
        if not isinstance(cur.get(k), dict):
            raise RenderError(f"--set {item!r}: {k} is not a map in the values")
        cur = cur[k]
    if path[-1] not in cur:
        raise RenderError(f"--set {item!r}: {key} is not in values.yaml")
    cur[path[-1]] = v


def load_chart(chart):
    with open(os.path.join(chart, "Chart.yaml")) as f:
        meta = yaml.safe_load(f)
    for field in ("apiVersion", "name", "version"):
        if field not in meta:
            raise RenderError(f"{chart}/Chart.yaml has no {field}")
    with open(os.path.join(chart, "values.yaml")) as f:
        values = yaml.safe_load(f) or {}
    tdir = os.path.join(chart, "templates")
    names = sorted(n for n in os.listdir(tdir) if n.endswith((".yaml", ".yml")))
    extra = sorted(n for n in os.listdir(tdir) if not n.endswith((".yaml", ".yml")))
    if extra:
        raise RenderError(f"{tdir}: files the renderer does not take: {extra} (no helpers, "
                          "no NOTES.txt)")
    return meta, values, [(n, os.path.join(tdir, n)) for n in names]


def render_chart(chart, release="tern", sets=()):
    """{template file name: rendered text}."""
    meta, values, templates = load_chart(chart)
    for s in sets:
        parse_set(values, s)
    ctx = {"values": values, "release": release}
    out = {}
    for name, path in templates:
        with open(path) as f:
            out[name] = render_text(f.read(), ctx, f"{meta['name']}/templates/{name}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chart")
    ap.add_argument("--release", default="tern")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--out-dir")
    args = ap.parse_args()
    try:
        rendered = render_chart(args.chart, args.release, args.sets)
    except (RenderError, OSError, yaml.YAMLError) as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 2
    if args.out_dir:
        for name, text in rendered.items():
            with open(os.path.join(args.out_dir, name), "w") as f:
                f.write("# Rendered from deploy/helm/tern/templates/" + name + " with the chart's "
                        "default values\n# and release name tern "
                        "(tests/deploy/render.py); edit the chart, then render again:\n"
                        "#   python3 tests/deploy/render.py deploy/helm/tern "
                        "--out-dir deploy/kubernetes\n")
                f.write(text)
        return 0
    for name, text in rendered.items():
        sys.stdout.write(f"---\n# Source: tern/templates/{name}\n{text}")
        if not text.endswith("\n"):
            sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
