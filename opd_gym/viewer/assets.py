"""The report's page template, stylesheet and tiny script (inline: the file works offline)."""

from __future__ import annotations

from string import Template

from opd_gym.viewer.tokens import (
    DARK_BUCKETS,
    DIVERGING_COLOURS,
    SEQUENTIAL_COLOURS,
)


def bucket_css() -> str:
    """One rule per colour bucket of both scales."""
    rules = [f".d{i}{{background:{c}}}" for i, c in enumerate(DIVERGING_COLOURS)]
    rules += [f".q{i}{{background:{c}}}" for i, c in enumerate(SEQUENTIAL_COLOURS)]
    rules.append(",".join(f".{b}" for b in DARK_BUCKETS) + "{color:#fff}")
    return "\n".join(rules)


STYLE = """
*{box-sizing:border-box}
body{margin:0;background:#f3f4f6;color:#1f2937;font:14px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1180px;margin:0 auto;padding:18px 20px 60px}
h1{font-size:22px;margin:0 0 2px}
h2{font-size:16px;margin:22px 0 8px}
.sub{color:#6b7280;font-size:13px}
pre,code,.mono,.tk{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;
font-size:12.5px}
pre{margin:0;white-space:pre-wrap;word-break:break-word}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 14px}
.stats{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:8px}
.stat{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:8px 10px}
.stat .k{color:#6b7280;font-size:11.5px;text-transform:uppercase;letter-spacing:.03em}
.stat .v{font-size:18px;font-weight:600;word-break:break-word}
.stat .v.small{font-size:12.5px;font-weight:500;font-family:ui-monospace,monospace}
.stat.warn{border-color:#f59e0b;background:#fffbeb}
.legend{display:flex;flex-wrap:wrap;gap:6px 28px;align-items:center}
.scale{display:flex;align-items:center;gap:6px}
.scale .name{font-weight:600;margin-right:4px}
.sw{display:inline-flex;flex-direction:column;align-items:center;font-size:10.5px;color:#4b5563}
.sw i{display:block;width:34px;height:16px;border:1px solid #d1d5db;border-radius:3px}
.legend .note{color:#6b7280;font-size:12.5px;flex-basis:100%}
table{border-collapse:collapse}
.index{width:100%;background:#fff;border:1px solid #e5e7eb;border-radius:8px;overflow:hidden}
.index th,.index td{padding:5px 10px;border-bottom:1px solid #f0f1f3;text-align:left}
.index th{background:#f9fafb;font-size:12px;color:#4b5563}
.index td.num{text-align:right;font-variant-numeric:tabular-nums}
a{color:#1d4ed8;text-decoration:none}
a:hover{text-decoration:underline}
.toolbar{display:flex;gap:8px;align-items:center;margin:18px 0 8px}
button{font:inherit;font-size:12.5px;padding:4px 10px;border:1px solid #d1d5db;
border-radius:6px;background:#fff;cursor:pointer}
button:hover{background:#f3f4f6}
#js-status{color:#6b7280;font-size:12px;margin-left:auto}
details.ep{background:#fff;border:1px solid #e5e7eb;border-radius:8px;margin:8px 0}
details.ep>summary{cursor:pointer;padding:9px 12px;display:flex;flex-wrap:wrap;gap:6px 12px;
align-items:center;list-style:none}
details.ep>summary::-webkit-details-marker{display:none}
details.ep>summary::before{content:"\\25B8";color:#9ca3af}
details.ep[open]>summary::before{content:"\\25BE"}
details.ep[open]>summary{border-bottom:1px solid #e5e7eb;background:#f9fafb}
.ep-body{padding:10px 14px 14px}
.ep-title{font-weight:600}
.badge{display:inline-block;padding:1px 8px;border-radius:999px;font-size:11.5px;
font-weight:600;letter-spacing:.02em}
.pass{background:#dcfce7;color:#166534}
.fail{background:#fee2e2;color:#991b1b}
.ungraded{background:#e5e7eb;color:#374151}
.kind.f2p{background:#dbeafe;color:#1e40af}.kind.p2p{background:#f3f4f6;color:#4b5563}
.unfinished{background:#fef3c7;color:#92400e}
.chip{display:inline-block;background:#f3f4f6;border:1px solid #e5e7eb;border-radius:5px;
padding:0 6px;font-size:12px;color:#374151;margin:1px 2px}
.chip b{font-weight:600}
.meta{margin:2px 0 10px}
.msg{border-left:4px solid #d1d5db;background:#fafafa;border-radius:0 6px 6px 0;
padding:6px 10px;margin:8px 0}
.msg>.h{font-size:12px;color:#4b5563;margin-bottom:3px}
.role{font-weight:700;text-transform:uppercase;font-size:11px;letter-spacing:.05em}
.msg.system{border-color:#9ca3af}
.msg.user{border-color:#8b5cf6;background:#f8f6ff}
.msg.note{border-color:#a78bfa;background:#faf9ff}
.msg.tool{border-color:#14b8a6;background:#f4fbfa}
.msg.tool.bad{border-color:#ef4444;background:#fef6f6}
.turn{border:1px solid #dbeafe;border-left:4px solid #3b82f6;border-radius:0 8px 8px 0;
background:#fff;padding:8px 10px;margin:12px 0 8px}
.turn>.h{font-size:12px;color:#4b5563;margin-bottom:6px}
.hint{background:#fffbeb;border:1px solid #fcd34d;border-left:4px solid #f59e0b;
border-radius:0 6px 6px 0;padding:6px 10px;margin:4px 0 8px}
.hint .h{font-size:11.5px;font-weight:700;color:#92400e;text-transform:uppercase;
letter-spacing:.04em}
.hint .votes{font-size:11.5px;color:#92400e;font-weight:400;text-transform:none;
letter-spacing:0}
.nohint{font-size:12px;color:#6b7280;margin:0 0 6px}
.text{background:#f8fafc;border-radius:5px;padding:6px 8px;margin:4px 0}
.call{border:1px solid #e5e7eb;border-radius:6px;margin:6px 0;overflow:hidden}
.call>.h{background:#eff6ff;padding:3px 8px;font-size:12.5px}
.call>.h .fn{font-family:ui-monospace,monospace;font-weight:700;color:#1e40af}
.arg{padding:3px 8px;border-top:1px solid #f3f4f6;display:flex;gap:8px}
.arg>.k{color:#6b7280;font-family:ui-monospace,monospace;font-size:12px;min-width:64px}
.arg>pre{flex:1}
.fmt-err,.err-note{background:#fef2f2;border:1px solid #fecaca;color:#991b1b;
border-radius:6px;padding:5px 8px;margin:6px 0;font-size:12.5px}
.fmt-err b,.err-note b{text-transform:uppercase;font-size:11px;letter-spacing:.04em}
details.tokens{margin-top:8px}
details.tokens>summary{cursor:pointer;font-size:12.5px;color:#374151}
.tokbox{margin-top:6px;padding:8px;background:#fff;border:1px solid #e5e7eb;
border-radius:6px;line-height:1.9;white-space:pre-wrap;word-break:break-all}
.tk{white-space:pre-wrap;padding:1px 0;margin-right:1px;border-radius:2px;cursor:default}
.tk:hover{outline:2px solid #111827;outline-offset:0}
.tk.m,.sw .m{background:repeating-linear-gradient(135deg,#e5e7eb 0 3px,#f3f4f6 3px 6px);
color:#6b7280}
.tk.n{background:#fff;box-shadow:inset 0 -1px 0 #9ca3af}
.more{color:#6b7280;font-size:12px;margin-top:4px}
.grade{margin-top:12px}
.grade .h{font-weight:600;margin-bottom:4px}
.tests td{padding:3px 8px;border-bottom:1px solid #f3f4f6;vertical-align:top}
.tests pre{font-size:11.5px;color:#4b5563;max-height:10em;overflow:auto}
.muted{color:#6b7280}
.diff{margin-top:12px}
.diff>summary{cursor:pointer}
.diff.unknown{background:#fef2f2;border-color:#fecaca;color:#991b1b}
.diff-text{margin-top:8px;max-height:40em;overflow:auto;background:#fafafa;
border:1px solid #f0f1f3;border-radius:6px;padding:6px 8px;white-space:pre}
.ln-add{background:#dcfce7;color:#166534}
.ln-del{background:#fee2e2;color:#991b1b}
.ln-hunk{color:#6d28d9}
.ln-meta{color:#374151;font-weight:600}
.warn-chip{background:#fef3c7;border-color:#fcd34d;color:#92400e}
select{font:inherit;font-size:12.5px;padding:3px 6px;border:1px solid #d1d5db;
border-radius:6px;background:#fff}
#filter-status{color:#6b7280;font-size:12px}
body[data-filter="failed-episodes"] details.ep:not([data-failed]),
body[data-filter="failed-episodes"] tr.eprow:not([data-failed]),
body[data-filter="failed-turns"] details.ep:not([data-fail-turns]),
body[data-filter="failed-turns"] tr.eprow:not([data-fail-turns]),
body[data-filter="failed-turns"] .tgroup:not([data-fail]),
body[data-filter="hinted-turns"] details.ep:not([data-hint-turns]),
body[data-filter="hinted-turns"] tr.eprow:not([data-hint-turns]),
body[data-filter="hinted-turns"] .tgroup:not([data-hint]){display:none}
#tip{position:fixed;display:none;z-index:10;background:#111827;color:#f9fafb;
border-radius:6px;padding:7px 9px;font:12px ui-monospace,"DejaVu Sans Mono",monospace;
max-width:380px;pointer-events:none;box-shadow:0 4px 14px rgba(0,0,0,.3)}
#tip .th{font-size:13px;font-weight:700;margin-bottom:4px;word-break:break-all}
#tip td{padding:0 8px 0 0;vertical-align:top}
#tip td:first-child{color:#9ca3af}
#tip .topk{margin-top:5px;border-top:1px solid #374151}
#tip .topk caption{text-align:left;color:#9ca3af;padding-top:4px}
#tip .topk tr.hit td{color:#fcd34d;font-weight:700}
"""

SCRIPT = """
(function () {
  var vocab = {};
  try { vocab = JSON.parse(document.getElementById("vocab").textContent || "{}"); }
  catch (e) { vocab = {}; }
  var tip = document.getElementById("tip");
  function name(id) {
    var text = vocab[id];
    return text === undefined ? "#" + id : JSON.stringify(text);
  }
  function num(v) { return v === undefined || v === "" ? "n/a" : Number(v).toFixed(3); }
  function row(table, cells, cls) {
    var tr = document.createElement("tr");
    if (cls) { tr.className = cls; }
    cells.forEach(function (c) {
      var td = document.createElement("td"); td.textContent = c; tr.appendChild(td);
    });
    table.appendChild(tr);
  }
  function place(ev) {
    var x = ev.clientX + 14, y = ev.clientY + 16;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 8) { x = Math.max(8, ev.clientX - w - 14); }
    if (y + h > window.innerHeight - 8) { y = Math.max(8, ev.clientY - h - 12); }
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  function show(el, ev) {
    var d = el.dataset;
    tip.textContent = "";
    var head = document.createElement("div");
    head.className = "th"; head.textContent = name(d.i); tip.appendChild(head);
    var t = document.createElement("table");
    row(t, ["position", d.j]); row(t, ["token id", d.i]);
    row(t, ["teacher lp", num(d.t)]); row(t, ["student lp", num(d.s)]);
    if (d.t && d.s) { row(t, ["teacher - student", (d.t - d.s).toFixed(3)]); }
    if (el.classList.contains("m")) { row(t, ["teacher", "masked: no signal"]); }
    if (el.classList.contains("n")) { row(t, ["teacher", "no OPD record"]); }
    tip.appendChild(t);
    if (d.k) {
      var k = document.createElement("table"); k.className = "topk";
      var cap = document.createElement("caption"); cap.textContent = "teacher top-K";
      k.appendChild(cap);
      d.k.split(" ").forEach(function (pair) {
        var p = pair.split(":");
        var pct = (100 * Math.exp(Number(p[1]))).toPrecision(3) + "%";
        row(k, [name(p[0]), p[1], pct], p[0] === d.i ? "hit" : "");
      });
      tip.appendChild(k);
    }
    tip.style.display = "block";
    place(ev);
  }
  document.addEventListener("mouseover", function (ev) {
    var el = ev.target.closest ? ev.target.closest(".tk") : null;
    if (el) { show(el, ev); } else { tip.style.display = "none"; }
  });
  document.addEventListener("mousemove", function (ev) {
    if (tip.style.display === "block") { place(ev); }
  });
  document.querySelectorAll("button[data-open]").forEach(function (b) {
    b.addEventListener("click", function () {
      var open = b.getAttribute("data-open") === "1";
      document.querySelectorAll("details.ep").forEach(function (d) { d.open = open; });
    });
  });
  var FILTERS = {"all": "", "failed-episodes": "[data-failed]",
                 "failed-turns": "[data-fail-turns]", "hinted-turns": "[data-hint-turns]"};
  var select = document.getElementById("filter");
  function applyFilter(value) {
    if (!(value in FILTERS)) { value = "all"; }
    document.body.setAttribute("data-filter", value);
    if (select) { select.value = value; }
    var all = document.querySelectorAll("details.ep");
    var shown = FILTERS[value] ? document.querySelectorAll("details.ep" + FILTERS[value])
                               : all;
    if (value.slice(-6) === "-turns") {
      shown.forEach(function (d) { d.open = true; });
    }
    var out = document.getElementById("filter-status");
    if (out) { out.textContent = "showing " + shown.length + " of " + all.length +
                                 " episodes"; }
  }
  if (select) {
    select.addEventListener("change", function () { applyFilter(select.value); });
  }
  var asked = /[?&#]filter=([a-z-]+)/.exec(location.search + location.hash);
  applyFilter(asked ? asked[1] : "all");
  function openHash() {
    var el = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    if (el && el.tagName === "DETAILS") { el.open = true; }
  }
  window.addEventListener("hashchange", openHash);
  openHash();
  var status = document.getElementById("js-status");
  var count = document.querySelectorAll(".tk").length;
  status.textContent = "interactive: " + count + " tokens, hover one for details";
  document.body.setAttribute("data-viewer", "ready");
})();
"""

PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="opd_gym viewer">
<title>$title</title>
<style>$style
$buckets</style>
</head>
<body>
<main>
$body
</main>
<div id="tip" role="tooltip"></div>
<script type="application/json" id="vocab">$vocab</script>
<script>$script</script>
</body>
</html>
""")
