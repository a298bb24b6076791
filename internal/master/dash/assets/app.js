// kvfabric master dashboard: polls the status document every second and
// redraws. Rates come from the master (computed from its counter deltas);
// the page keeps the last HISTORY of them for sparklines. Every string from
// the master goes in through textContent, never as HTML.
"use strict";

const POLL_MS = 1000;
const HISTORY = 120;
const ERRORS_SHOWN = 12;
const history = {};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + u[i];
}
const gbps = (b) => (b / 1e9).toFixed(b < 1e9 ? 3 : 2) + " GB/s";
const num = (n, d = 0) => Number(n).toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });
const pct = (a, b) => (b > 0 ? (100 * a) / b : 0);
function ago(s) {
  if (s < 1) return (s * 1000).toFixed(0) + " ms ago";
  if (s < 120) return s.toFixed(1) + " s ago";
  return (s / 60).toFixed(1) + " min ago";
}
function locName(tier, loc) { return (tier === "hbm" ? "GPU " : "NUMA ") + loc; }

function bar(tier, used, cap) {
  const b = el("div", { class: "bar " + tier, title: bytes(used) + " of " + bytes(cap) });
  const s = el("span");
  s.style.width = pct(used, cap).toFixed(1) + "%";
  b.append(s);
  return b;
}

function spark(key, v) {
  const h = history[key] || (history[key] = []);
  h.push(v);
  if (h.length > HISTORY) h.shift();
  const max = Math.max(...h, 1e-9);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${HISTORY} 34`);
  svg.setAttribute("preserveAspectRatio", "none");
  const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  const off = HISTORY - h.length;
  pl.setAttribute("points", h.map((y, i) => `${off + i},${(32 - (30 * y) / max).toFixed(1)}`).join(" "));
  svg.append(pl);
  return svg;
}

function fill(id, rows) {
  const tb = document.querySelector(`#${id} tbody`);
  tb.replaceChildren(...rows);
}

function row(...cells) {
  return el("tr", {}, ...cells.map((c) => (c instanceof HTMLElement && c.tagName === "TD" ? c : el("td", {}, c))));
}

function render(st) {
  document.getElementById("updated").textContent =
    "at " + new Date(st.time).toLocaleTimeString() + " · up " + num(st.uptime_seconds / 60, 1) + " min";

  const totals = [["segments", st.segments], ["objects", st.objects], ["pending puts", st.pending_puts],
    ["leases held", st.leases_held], ["views held", st.views_held], ["clients", st.clients]];
  document.getElementById("totals").replaceChildren(...totals.map(([k, v]) =>
    el("div", { class: "total", id: "total-" + k.replace(/ /g, "-") }, el("b", {}, num(v)), el("span", { class: "muted" }, k))));

  const r = st.rates;
  document.getElementById("window").textContent = `rates over the last ${num(r.window_seconds, 1)} s, computed by the master`;
  const rates = [
    ["puts", "puts/s", num(r.puts_per_second, 1), r.puts_per_second],
    ["put-bytes", "put throughput", gbps(r.put_bytes_per_second), r.put_bytes_per_second],
    ["gets", "gets/s", num(r.gets_per_second, 1), r.gets_per_second],
    ["get-bytes", "get throughput", gbps(r.get_bytes_per_second), r.get_bytes_per_second],
    ["hit-ratio", "hit ratio (hits / misses per s)", r.gets_per_second > 0 ? num(100 * r.hit_ratio, 1) + " %" : "–", r.hit_ratio,
      num(r.hits_per_second, 1) + " / " + num(r.misses_per_second, 1)],
    ["evictions", "evictions/s", num(r.evictions_per_second, 1), r.evictions_per_second],
    ["errors", "errors/s", num(r.errors_per_second, 1), r.errors_per_second],
  ];
  document.getElementById("rates").replaceChildren(...rates.map(([id, label, text, v, sub]) =>
    el("div", { class: "card", id: "rate-" + id },
      el("div", { class: "label" }, label + (sub ? " · " + sub : "")),
      el("div", { class: "value" }, text), spark(id, v))));

  document.getElementById("tiers").replaceChildren(...(st.tiers || []).map((t) =>
    el("div", { class: "card", id: "tier-" + t.tier },
      el("div", { class: "label" }, t.tier.toUpperCase() + " · " + t.segments + " segments · " + num(t.blocks) + " blocks"),
      el("div", { class: "value" }, bytes(t.used_bytes) + " / " + bytes(t.capacity_bytes)),
      bar(t.tier, t.used_bytes, t.capacity_bytes),
      el("div", { class: "muted" }, num(pct(t.used_bytes, t.capacity_bytes), 1) + " % used · " + bytes(t.free_bytes) + " free"))));

  const nodes = st.nodes || [];
  document.getElementById("map").replaceChildren(...nodes.map((n) =>
    el("div", { class: "node" },
      el("h3", {}, n.node, el("span", { class: "muted" }, "  " + bytes(n.used_bytes) + " / " + bytes(n.capacity_bytes))),
      ...n.locations.map((l) => {
        const segs = el("div", { class: "segs" }, ...l.segments.map((s) => {
          const d = el("div", { class: `seg ${l.tier} ${s.state}`, title: `${s.id}: ${bytes(s.used_bytes)} of ${bytes(s.capacity_bytes)} (${s.state})` });
          const f = el("span");
          f.style.height = pct(s.used_bytes, s.capacity_bytes).toFixed(1) + "%";
          d.append(f);
          return d;
        }));
        return el("div", { class: "loc" },
          el("div", {}, locName(l.tier, l.location) + " · " + l.tier + " · " + l.segments.length + " segments · " +
            bytes(l.used_bytes) + " / " + bytes(l.capacity_bytes)),
          bar(l.tier, l.used_bytes, l.capacity_bytes), segs);
      }))));

  const segRows = [];
  for (const n of nodes) for (const l of n.locations) for (const s of l.segments) {
    const tr = row(n.node, locName(l.tier, l.location), s.id, s.owner, s.handle, bar(l.tier, s.used_bytes, s.capacity_bytes),
      bytes(s.used_bytes), bytes(s.capacity_bytes), bytes(s.largest_free_bytes), num(s.blocks),
      el("td", { class: s.state === "ok" ? "live" : s.state === "draining" ? "late" : "bad" }, s.state));
    tr.dataset.segment = s.id;
    segRows.push(tr);
  }
  fill("segments", segRows);

  fill("clients", (st.clients_list || []).map((c) => {
    const tr = row(c.id, c.node, c.principal || "–", c.roles.join(", "), c.driver || "unknown",
      c.segments ? c.segments + " segs, " + bytes(c.capacity_bytes) : "–",
      c.mapped_segments ? c.mapped_segments + " segs, " + bytes(c.mapped_bytes) : "–",
      c.pending_puts ? c.pending_puts + " (" + bytes(c.reserved_bytes) + ")" : "0",
      num(c.views || 0),
      ago(c.heartbeat_ago_seconds),
      el("td", { class: c.liveness, title: "registration expires in " + num(c.expires_in_seconds, 1) + " s (TTL " + num(c.ttl_seconds, 1) + " s)" }, c.liveness));
    tr.dataset.client = c.id;
    return tr;
  }));

  fill("evictions", (st.evictions || []).filter((e) => e.count > 0).map((e) => row(e.tier, e.reason, num(e.count))));
  const c = st.counters;
  fill("counters", [
    ["puts (visible)", num(c.puts)], ["bytes put", bytes(c.put_bytes)], ["put starts granted", num(c.put_starts)],
    ["puts refused: no space", num(c.put_no_space)], ["gets (hits + misses)", num(c.gets) + " (" + num(c.get_hits) + " + " + num(c.get_misses) + ")"],
    ["bytes leased to readers", bytes(c.get_bytes)], ["evictions", num(c.evictions)], ["errors", num(c.errors)],
    ["lease expiries", num(c.lease_expiries)], ["put timeouts", num(c.put_timeouts)],
    ["client expiries", num(c.client_expiries)], ["unreachable reports", num(c.unreachable_reports)],
  ].map(([k, v]) => row(k, v)));
  const errs = st.errors || [];
  const shown = errs.slice(0, ERRORS_SHOWN).map((e) =>
    row(new Date(e.time).toLocaleTimeString(), e.op, e.result, el("td", { class: "msg" }, e.message)));
  if (errs.length > ERRORS_SHOWN) {
    shown.push(row("", "", "", el("td", { class: "muted" }, `${errs.length - ERRORS_SHOWN} older in /api/v1/status`)));
  }
  fill("errors", shown);
}

async function poll() {
  const conn = document.getElementById("conn");
  try {
    const resp = await fetch("api/v1/status", { cache: "no-store", credentials: "same-origin" });
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()).trim());
    render(await resp.json());
    conn.textContent = "live";
    conn.className = "conn ok";
  } catch (e) {
    conn.textContent = "no data: " + e.message;
    conn.className = "conn bad";
  }
  setTimeout(poll, POLL_MS);
}
poll();
