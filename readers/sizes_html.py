"""``fstate sizes --html FILE``: the report as one self-contained page (no network: inline CSS, SVG
charts and a small script).

Every number shown carries the JSON path it comes from (``data-json``, into the document
``SizesReport.to_dict()`` / ``GrowthReport.to_dict()`` gives, the one ``--json`` prints) and its
value (``data-value``); the page embeds that document and its script checks each number against it
when the page loads (a mismatch is a console error), then marks ``<body data-checked="N">``.
"""

from __future__ import annotations

import html
import json
from typing import Any, Sequence

from .sizes_join import KEY_COUNTS

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #eee}
td.n{text-align:right;font-variant-numeric:tabular-nums}.bar{display:inline-block;height:10px;background:#4a7fb5}
.bar.grow{background:#c0504d}.muted{color:#777}svg{display:block;margin:6px 0}svg text{font-size:11px}
.charts{display:flex;flex-wrap:wrap;gap:18px}
"""

_SCRIPT = """
(function(){
  var data = JSON.parse(document.getElementById('sizes-data').textContent);
  function at(path){ return path.split('.').reduce(function(v, k){ return v == null ? v : v[k]; }, data); }
  function human(n){ var u=['B','KiB','MiB','GiB','TiB'], i=0; while(n>=1024&&i<4){n/=1024;i++;}
    return i ? n.toFixed(1)+' '+u[i] : n+' B'; }
  var checked = 0;
  document.querySelectorAll('[data-json]').forEach(function(el){
    var want = at(el.getAttribute('data-json')), shown = el.getAttribute('data-value');
    if (String(want) !== shown) { console.error('sizes page: ' + el.getAttribute('data-json') + ' shows ' + shown +
                                                ' but the report has ' + want); return; }
    if (el.classList.contains('bytes')) { el.title = human(Number(shown)); }
    checked++;
  });
  document.body.setAttribute('data-checked', String(checked));
})();
"""

_PALETTE = ("#4a7fb5", "#e39b3b", "#5aa05a", "#c0504d", "#8064a2", "#4bacc6", "#9b8b6e", "#d16fb0")


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: int | float, path: str, bytes_: bool = False) -> str:
    """A number with its JSON path (checked by the page's script)."""
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
    cls = ' class="n bytes"' if bytes_ else ' class="n"'
    return f'<td{cls} data-json="{_esc(path)}" data-value="{_esc(_js(value))}">{text}</td>'


def _js(value: int | float) -> str:
    """A number as JavaScript's String() writes it."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _bar(value: int, largest: int, grow: bool = False) -> str:
    width = 0 if not largest else max(1, round(160 * value / largest)) if value > 0 else 0
    return f'<td><span class="bar{" grow" if grow else ""}" style="width:{width}px"></span></td>'


def _table(head: Sequence[str], rows: list[str]) -> str:
    return ("<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr>"
            + "".join(f"<tr>{row}</tr>" for row in rows) + "</table>")


#: at most this many columns in a chart: more key groups are drawn in contiguous ranges
MAX_COLUMNS = 512


def _columns(values: Sequence[int], path: str, width: int = 640, height: int = 110, label: str = "") -> str:
    """An SVG column chart of ``values``, each column carrying its JSON path; over
    :data:`MAX_COLUMNS` values, a column per contiguous range of them (its sum, no path)."""
    ranges = [(i, i) for i in range(len(values))]
    if len(values) > MAX_COLUMNS:
        step = -(-len(values) // MAX_COLUMNS)
        ranges = [(i, min(i + step, len(values)) - 1) for i in range(0, len(values), step)]
    heights = [sum(values[lo:hi + 1]) for lo, hi in ranges]
    count = len(ranges) or 1
    largest = max(heights) if heights else 0
    step_x = width / count
    bars = []
    for index, ((lo, hi), value) in enumerate(zip(ranges, heights)):
        h = 0 if not largest else round((height - 14) * value / largest, 1)
        where = f'data-json="{_esc(path)}.{lo}" data-value="{value}"' if lo == hi else ""
        name = str(lo) if lo == hi else f"{lo}..{hi}"
        bars.append(f'<rect x="{index * step_x:.1f}" y="{height - h:.1f}" width="{max(step_x - 1, 0.5):.1f}" '
                    f'height="{h}" fill="#4a7fb5" {where}><title>{name}: {value:,} B</title></rect>')
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="{_esc(label)}">'
            f'<text x="0" y="11">{_esc(label)}</text>{"".join(bars)}</svg>')


def _treemap(operators: list[dict], width: int = 900, height: int = 260) -> str:
    """Keyed state by operator (columns as wide as their bytes) and state (stacked within)."""
    total = sum(op["keyed_bytes"] for op in operators)
    if not total:
        return '<p class="muted">no keyed state</p>'
    parts, x = [], 0.0
    for index, op in enumerate(operators):
        if not op["keyed_bytes"]:
            continue
        w = width * op["keyed_bytes"] / total
        y = 0.0
        for number, state in enumerate(op["states"]):
            if not state["bytes"]:
                continue
            h = height * state["bytes"] / op["keyed_bytes"]
            colour = _PALETTE[number % len(_PALETTE)]
            name = f"{op['uid'] or op['uid_hash']} / {state['name']}"
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{colour}" '
                         f'stroke="#fff" data-json="operators.{index}.states.{number}.bytes" '
                         f'data-value="{state["bytes"]}"><title>{_esc(name)}: {state["bytes"]:,} B</title></rect>')
            if w > 60 and h > 14:
                parts.append(f'<text x="{x + 3:.1f}" y="{y + 12:.1f}" fill="#fff">{_esc(state["name"][:int(w / 7)])}'
                             f'</text>')
            y += h
        x += w
    return f'<svg width="{width}" height="{height}" role="img" aria-label="state by operator">{"".join(parts)}</svg>'


def _operator_section(index: int, op: dict) -> str:
    base = f"operators.{index}"
    name = op["uid"] or op["uid_hash"]
    described = op.get("sql") or {}
    sql = (f' <span class="muted">({_esc(described["kind"])}'
           + (f': {_esc(described["description"])}' if described.get("description") else "") + ")</span>"
           if described else "")
    out = [f"<h2>{_esc(name)}{sql}</h2>",
           f'<p class="muted">uid hash {_esc(op["uid_hash"])}, parallelism {op["parallelism"]}, '
           f'max parallelism {op["max_parallelism"]}</p>']
    largest = max((s["bytes"] for s in op["states"]), default=0)
    rows = []
    for number, state in enumerate(op["states"]):
        path = f"{base}.states.{number}"
        ttl = state["ttl"]
        expired = (_num(ttl["expired_entries"], f"{path}.ttl.expired_entries")
                   + _num(ttl["expired_bytes"], f"{path}.ttl.expired_bytes", True)) if ttl else "<td></td><td></td>"
        rows.append(f"<td>{_esc(state['name'])}</td><td>{_esc(state['kind'])}</td>"
                    + _num(state["bytes"], f"{path}.bytes", True) + _bar(state["bytes"], largest)
                    + _num(state["entries"], f"{path}.entries") + _num(state["keys"], f"{path}.keys")
                    + _num(state["elements"], f"{path}.elements") + expired)
    out.append(_table(("state", "kind", "bytes", "", "entries", "keys", "elements", "expired entries",
                       "expired bytes"), rows))
    skew_rows = []
    for what in ("subtask_skew", "key_group_skew"):
        skew = op[what]
        skew_rows.append(f"<td>{what.split('_skew')[0].replace('_', ' ')}s</td>"
                         + _num(skew["max"], f"{base}.{what}.max", True) + _num(skew["mean"], f"{base}.{what}.mean")
                         + _num(skew["p99"], f"{base}.{what}.p99", True)
                         + _num(skew["max_over_mean"], f"{base}.{what}.max_over_mean")
                         + "<td>" + ", ".join(f"{h['index']}" for h in skew["heaviest"][:5]) + "</td>")
    out.append("<h3>Skew</h3>" + _table(("over", "max", "mean", "p99", "max / mean", "heaviest"), skew_rows))
    out.append("<h3>Key groups</h3>" + _columns(op["key_group_bytes"], f"{base}.key_group_bytes",
                                                label=f"bytes per key group (0..{op['max_parallelism'] - 1})"))
    charts = []
    for number, point in enumerate(op["rescale"]):
        path = f"{base}.rescale.{number}"
        label = (f"parallelism {point['parallelism']}: max/mean {point['max_over_mean']:.2f}"
                 + (" (best)" if point["parallelism"] == op["best_parallelism"] else ""))
        charts.append(_columns(point["subtask_bytes"], f"{path}.subtask_bytes", width=260, height=90, label=label))
    out.append("<h3>Subtask load by parallelism</h3><div class=\"charts\">" + "".join(charts) + "</div>")
    rescale_rows = [f"<td>{point['parallelism']}</td>" + _num(point["max"], f"{base}.rescale.{n}.max", True)
                    + _num(point["mean"], f"{base}.rescale.{n}.mean")
                    + _num(point["max_over_mean"], f"{base}.rescale.{n}.max_over_mean")
                    for n, point in enumerate(op["rescale"])]
    out.append(_table(("parallelism", "max subtask bytes", "mean", "max / mean"), rescale_rows))
    for number, state in enumerate(op["states"]):
        for top in ("top_by_bytes", "top_by_elements"):
            if not state[top]:
                continue
            largest_key = max(k["bytes"] if top == "top_by_bytes" else k["elements"] for k in state[top])
            rows = []
            for rank, item in enumerate(state[top]):
                path = f"{base}.states.{number}.{top}.{rank}"
                measure = item["bytes"] if top == "top_by_bytes" else item["elements"]
                rows.append(f"<td>{_esc(item['key'])}</td>" + _num(item["key_group"], f"{path}.key_group")
                            + _num(item["bytes"], f"{path}.bytes", True) + _num(item["entries"], f"{path}.entries")
                            + _num(item["elements"], f"{path}.elements") + _bar(measure, largest_key))
            what = "bytes" if top == "top_by_bytes" else "list / map elements"
            out.append(f"<h3>{_esc(state['name'])}: largest keys by {what}</h3>"
                       + _table(("key", "key group", "bytes", "entries", "elements", ""), rows))
    return "".join(out)


def _job_section(job: dict) -> str:
    """The job-level rescale preview: keyed state per slot at each parallelism (slot sharing)."""
    if not job["rescale"] or not job["following"] + job["fixed"]:
        return ""
    charts, rows = [], []
    for n, point in enumerate(job["rescale"]):
        path = f"job.rescale.{n}"
        label = (f"parallelism {point['parallelism']}: max/mean {point['max_over_mean']:.2f}"
                 + (" (best)" if point["parallelism"] == job["best_parallelism"] else ""))
        charts.append(_columns(point["slot_bytes"], f"{path}.slot_bytes", width=260, height=90, label=label))
        rows.append(f"<td>{point['parallelism']}</td>" + _num(point["max"], f"{path}.max", True)
                    + _num(point["mean"], f"{path}.mean") + _num(point["max_over_mean"], f"{path}.max_over_mean"))
    notes = [f"{_esc(f['operator'])} keeps its own parallelism {f['parallelism']}" for f in job["fixed"]]
    notes += [f"parallelism {s['parallelism']}: not possible, {_esc(s['reason'])}" for s in job["skipped"]]
    return (f"<h2>Job: keyed state per slot (slot sharing, the job's parallelism {job['parallelism']})</h2>"
            + "".join(f'<p class="muted">{note}</p>' for note in notes)
            + '<div class="charts">' + "".join(charts) + "</div>"
            + _table(("parallelism", "fullest slot bytes", "mean", "max / mean"), rows))


def _operator_states(operators: list[dict]) -> str:
    """List, union and broadcast states: their bytes and entries, and per subtask (a column chart)."""
    listed = [(i, n, op, state) for i, op in enumerate(operators) for n, state in enumerate(op["operator_states"])]
    if not listed:
        return ""
    largest = max(state["bytes"] for *_, state in listed)
    rows = []
    for i, n, op, state in listed:
        path = f"operators.{i}.operator_states.{n}"
        chart = (_columns(state["subtask_bytes"], f"{path}.subtask_bytes", width=160, height=40)
                 if len(state["subtask_bytes"]) > 1 else "")
        rows.append(f"<td>{_esc(op['uid'] or op['uid_hash'])}</td><td>{_esc(state['name'])}</td>"
                    f"<td>{_esc(state['kind'])}</td>" + _num(state["bytes"], f"{path}.bytes", True)
                    + _bar(state["bytes"], largest) + _num(state["entries"], f"{path}.entries") + f"<td>{chart}</td>")
    return "<h2>Operator states</h2>" + _table(("operator", "state", "kind", "bytes", "", "entries",
                                               "bytes per subtask"), rows)


def _page(title: str, data: dict, body: str) -> str:
    # the embedded JSON may hold any key text: '</' must not end the script element
    embedded = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_STYLE}</style></head><body>{body}"
            f"<script type=\"application/json\" id=\"sizes-data\">{embedded}</script>"
            f"<script>{_SCRIPT}</script></body></html>")


def render(data: dict) -> str:
    """The page of a :class:`.sizes.SizesReport`'s ``to_dict()``."""
    operators = data["operators"]
    head = (f"<h1>State sizes: {_esc(data['path'])}</h1><table><tr><td>state bytes (handles)</td>"
            + _num(data["handle_bytes"], "handle_bytes", True) + "</tr><tr><td>keyed state bytes (entries)</td>"
            + _num(data["keyed_bytes"], "keyed_bytes", True) + "</tr><tr><td>operator state bytes (elements, entries)"
            "</td>" + _num(data["operator_state_bytes"], "operator_state_bytes", True) + "</tr></table>")
    largest = max((op["keyed_bytes"] + sum(op["handle_operator_bytes"]) for op in operators), default=0)
    rows = [f"<td>{_esc(op['uid'] or op['uid_hash'])}</td><td>{_esc((op.get('sql') or {}).get('kind') or '')}</td>"
            + _num(op["keyed_bytes"], f"operators.{i}.keyed_bytes", True)
            + _num(op["entries"], f"operators.{i}.entries")
            + _num(op["handle_bytes"], f"operators.{i}.handle_bytes", True)
            + _bar(op["keyed_bytes"] + sum(op["handle_operator_bytes"]), largest)
            for i, op in enumerate(operators)]
    body = [head, "<h2>State by operator</h2>", _treemap(operators),
            _table(("operator", "sql", "keyed bytes", "entries", "all state (handles)", ""),
                   rows)]
    body.append(_job_section(data["job"]))
    body.append(_operator_states(operators))
    body.extend(_operator_section(i, op) for i, op in enumerate(operators) if op["states"])
    return _page(f"fstate sizes {data['path']}", data, "".join(body))


#: the growth page's key lists: (JSON field, heading)
_KEY_LISTS = (("keys", "Keys that grew most (bytes)"),
              ("keys_by_elements", "Keys that grew most (list / map elements)"),
              ("shrunk_keys", "Keys that shrank most (gone keys: new bytes 0)"))


def render_growth(data: dict) -> str:
    """The page of a :class:`.sizes_growth.GrowthReport`'s ``to_dict()``."""
    body = [f"<h1>State growth: {_esc(data['old'])} → {_esc(data['new'])}</h1>"]
    for part in ("operators", "states"):
        rows = data[part]
        largest = max((abs(g["growth"]) for g in rows), default=0)
        body.append(f"<h2>{part.capitalize()}</h2>" + _table(
            ("operator", "state", "old bytes", "new bytes", "growth", "", "old entries", "new entries"),
            [f"<td>{_esc(g['operator'])}</td><td>{_esc(g['state'] or '')}</td>"
             + _num(g["old_bytes"], f"{part}.{i}.old_bytes", True) + _num(g["new_bytes"], f"{part}.{i}.new_bytes", True)
             + _num(g["growth"], f"{part}.{i}.growth", True) + _bar(abs(g["growth"]), largest, g["growth"] > 0)
             + _num(g["old_entries"], f"{part}.{i}.old_entries") + _num(g["new_entries"], f"{part}.{i}.new_entries")
             for i, g in enumerate(rows)]))
    for part, heading in _KEY_LISTS:
        rows = data[part]
        if not rows:
            continue
        measure = "element_growth" if part == "keys_by_elements" else "growth"
        largest = max(abs(g[measure]) for g in rows)
        body.append(f"<h2>{_esc(heading)}</h2>" + _table(
            ("operator", "state", "key", "key group", "old bytes", "new bytes", "growth", "", "old elements",
             "new elements", "element growth"),
            [f"<td>{_esc(g['operator'])}</td><td>{_esc(g['state'])}</td><td>{_esc(g['key'])}</td>"
             + _num(g["key_group"], f"{part}.{i}.key_group")
             + _num(g["old_bytes"], f"{part}.{i}.old_bytes", True) + _num(g["new_bytes"], f"{part}.{i}.new_bytes", True)
             + _num(g["growth"], f"{part}.{i}.growth", True) + _bar(abs(g[measure]), largest, g[measure] > 0)
             + _num(g["old_elements"], f"{part}.{i}.old_elements")
             + _num(g["new_elements"], f"{part}.{i}.new_elements")
             + _num(g["element_growth"], f"{part}.{i}.element_growth")
             for i, g in enumerate(rows)]))
    rows = []
    for i, join in enumerate(data["key_joins"]):
        for n, state in enumerate(join["states"]):
            path = f"key_joins.{i}.states.{n}"
            rows.append(f"<td>{_esc(join['operator'])}</td><td>{_esc(state['name'])}</td>"
                        + "".join(_num(state[c], f"{path}.{c}") for c in KEY_COUNTS)
                        + f"<td>{_esc(join['join'])}</td><td class=\"muted\">{_esc(join['note'] or '')}</td>")
    body.append("<h2>Keys, OLD against NEW</h2>" + _table(
        ("operator", "state", "new", "gone", "grown", "shrunk", "same", "joined by", ""), rows))
    return _page(f"fstate sizes {data['old']} {data['new']}", data, "".join(body))
