// The debug page: reads the debug API every few seconds and redraws the gangs and the topology tree.
// State that survives a reload (selected gang, topology, resource) lives in the URL hash.
"use strict";

const REFRESH_MS = 1000 * (Number(new URLSearchParams(location.search).get("refresh")) || 3);
const CELL_LIMIT = 16;              // nodes with more units than this get a bar instead of one cell per unit
const SLOT_LIMIT = 64;              // slots listed in the gang detail
const PALETTE = ["#2563eb", "#db2777", "#0d9488", "#9333ea", "#ea580c", "#65a30d", "#0891b2", "#be123c"];
const WAITING = ["refused", "pending"];

const view = Object.fromEntries(new URLSearchParams(location.hash.slice(1)));   // gang, topology, resource
let lastDrawn = "";
let lastData = null;

// ---- fetching --------------------------------------------------------------------------------------

async function getJSON(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) {
    let detail = "";
    try { detail = (await response.json()).detail || ""; } catch (_) { /* not JSON */ }
    throw new Error(`${path}: HTTP ${response.status} ${detail}`.trim());
  }
  return response.json();
}

async function load() {
  const [plans, topologies] = await Promise.all([getJSON("debug/plans"), getJSON("debug/topology")]);
  const gangs = new Set(plans.plans.map((p) => p.gang));
  if (view.gang && !gangs.has(view.gang)) delete view.gang;          // the gang went away
  const names = topologies.topologies.map((t) => t.name);
  const selected = plans.plans.find((p) => p.gang === view.gang);
  if (!names.includes(view.topology)) {
    view.topology = [selected && selected.topology, "default", names[0]].find((n) => names.includes(n));
  }
  if (!topologies.resources.includes(view.resource)) view.resource = defaultResource(topologies.resources);
  const [tree, plan] = await Promise.all([
    view.topology ? getJSON(`debug/topology/${enc(view.topology)}?resource=${enc(view.resource)}`) : null,
    view.gang ? getJSON(`debug/plans/${view.gang.split("/").map(enc).join("/")}`) : null,
  ]);
  return { plans, topologies, tree, plan };
}

function defaultResource(resources) {
  return ["nvidia.com/gpu", ...resources.filter((r) => r.includes("gpu")), "pods", resources[0]]
    .find((r) => resources.includes(r));
}

let timer = null;
let busy = false;
let again = false;              // a selection changed during a refresh: refresh once more right after

async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  clearTimeout(timer);
  document.getElementById("pulse").classList.add("on");
  try {
    lastData = await load();
    draw();
    showError(null);
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  } catch (error) {
    showError(error);
  } finally {
    document.getElementById("pulse").classList.remove("on");
    busy = false;
    timer = setTimeout(refresh, again ? 0 : REFRESH_MS);
    again = false;
  }
}

function showError(error) {
  const banner = document.getElementById("banner");
  banner.hidden = !error;
  if (error) {
    const when = document.getElementById("updated").textContent;
    banner.textContent = `Cannot refresh: ${error.message}. Showing the data of ${when}; ` +
      `retrying every ${REFRESH_MS / 1000} s.`;
  }
}

function select(changes) {
  Object.assign(view, changes);
  for (const key of Object.keys(view)) if (!view[key]) delete view[key];
  history.replaceState(null, "", "#" + new URLSearchParams(view));
  refresh();
}

// ---- drawing ---------------------------------------------------------------------------------------

function draw() {
  const snapshot = JSON.stringify([lastData, view]);
  if (snapshot === lastDrawn) return;                 // nothing new: keep the DOM (and any hover) as is
  lastDrawn = snapshot;
  const { plans, topologies, tree, plan } = lastData;
  const colours = segmentColours(plan);
  fill("counts", drawCounts(plans));
  fill("gangs", drawGangs(plans.plans, plan, colours));
  fill("tabs", topologies.topologies.map((t) =>
    el("button", { class: t.name === view.topology ? "tab active" : "tab", onclick: () => select({ topology: t.name }) },
      t.name, el("small", {}, ` ${t.nodes} nodes`))));
  const resource = document.getElementById("resource");
  if (resource.dataset.options !== topologies.resources.join()) {    // keep an open menu open
    resource.dataset.options = topologies.resources.join();
    resource.replaceChildren(...topologies.resources.map((r) => el("option", {}, r)));
    resource.onchange = () => select({ resource: resource.value });
  }
  resource.value = view.resource;
  fill("notices", drawNotices(topologies, tree));
  const treeBox = document.getElementById("tree");
  treeBox.classList.toggle("has-selection", Boolean(plan) && plan.topology === view.topology);
  fill("totals", tree ? [summary(tree.totals, view.resource, tree.units[view.resource]),
    el("span", { class: "muted" }, view.resource)] : []);
  fill("levels", tree ? [`levels: ${tree.levels.join(" › ")}`] : []);
  if (!tree) {
    treeBox.replaceChildren(el("p", { class: "empty" },
      "No topology known. Create a Topology (kai.scheduler/v1alpha1 or kueue.x-k8s.io) " +
      "or Volcano HyperNodes, or label nodes for the built-in levels."));
    return;
  }
  const marks = plan && plan.topology === tree.name ? planMarks(plan, colours) : { nodes: {}, domains: {}, onNode: {} };
  const unit = tree.units[view.resource];
  treeBox.replaceChildren(el("div", { class: "children" }, tree.domains.map((d) => drawDomain(d, 0, marks, unit))));
  for (const box of treeBox.querySelectorAll(".children")) {     // children that are all nodes: a square grid
    if ([...box.children].every((c) => c.classList.contains("node"))) {
      box.className = "nodes";
      box.style.setProperty("--columns", Math.ceil(Math.sqrt(box.children.length)));
    }
  }
}

function drawCounts(plans) {
  const counts = Object.entries(plans.counts).map(([status, n]) =>
    el("span", { class: `count ${status}`, title: `gangs whose status is ${status}` },
      el("b", {}, n), ` ${n === 1 ? "gang" : "gangs"} ${status}`));
  const s = plans.settings;
  return [...counts, el("span", { class: "count" }, el("b", {}, plans.reservations), " reserved slots"),
    el("span", { class: "setting" }, `${s.strategy} · ttl ${s.reservation_ttl} s · preemption ${s.preemption}`)];
}

function drawGangs(list, plan, colours) {
  if (!list.length) {
    return [el("p", { class: "empty" }, "No gangs yet. A gang appears here when kube-scheduler sends " +
      "its first pod to the extender's filter verb.")];
  }
  const hint = view.gang ? null : el("p", { class: "muted" }, "Select a gang to see its domains and segments on the tree.");
  const waiting = list.filter((g) => WAITING.includes(g.status));
  const placed = list.filter((g) => !WAITING.includes(g.status));
  return [hint,
    waiting.length ? el("h3", {}, `Waiting (${waiting.length})`) : null, ...waiting.map((g) => drawGang(g, plan, colours)),
    placed.length ? el("h3", {}, `Placed (${placed.length})`) : null, ...placed.map((g) => drawGang(g, plan, colours)),
  ];
}

function drawGang(gang, plan, colours) {
  const selected = gang.gang === view.gang;
  const c = gang.counts;
  return el("article", { class: `gang ${gang.status}${selected ? " selected" : ""}`, "data-gang": gang.gang },
    el("button", { class: "gang-head", title: "show this gang on the tree",
      onclick: () => select({ gang: selected ? "" : gang.gang, topology: gang.topology || view.topology }) },
      el("span", { class: `badge ${gang.status}` }, gang.status),
      el("span", { class: "gang-name", title: `gang ${gang.gang}` }, gang.workload || gang.name),
      el("span", { class: "muted" }, gang.namespace)),
    el("div", { class: "muted" }, `${gang.kind} · ${gang.summary} · ${gang.topology || "no topology"}`),
    gang.status === "refused" ? null
      : el("div", { class: "muted pods" }, `pods: ${c.bound} bound · ${c.planned} planned · ${c.unplaced} unplaced`),
    el("div", { class: "muted internal" }, `PodGroup ${gang.name}`),
    gang.reason ? el("p", { class: "reason" }, gang.reason) : null,
    ...gang.warnings.map((w) => el("p", { class: "warning" }, w)),
    selected && plan ? drawPlan(plan, colours) : null);
}

function drawPlan(plan, colours) {
  const slots = plan.slots.slice(0, SLOT_LIMIT).map((s) =>
    el("tr", {}, el("td", {}, chip(s.group, colours)), el("td", {}, s.slot), el("td", {}, s.node || "—"),
      el("td", { class: s.status }, s.status + (s.reserved ? " · reserved" : ""))));
  const more = plan.slots.length - SLOT_LIMIT;
  return el("div", { class: "plan" },
    plan.groups.length ? el("table", {}, el("tr", {}, el("th", {}, "group"), el("th", {}, "level"), el("th", {}, "domain")),
      plan.groups.map((g) => el("tr", {}, el("td", {}, chip(g.group, colours)), el("td", {}, g.level || "any"),
        el("td", { title: g.domain || "" }, g.domain ? g.domain.split("/").pop() : "—")))) : null,
    slots.length ? el("table", {}, el("tr", {}, el("th", {}, "segment"), el("th", {}, "slot"), el("th", {}, "node"),
      el("th", {}, "status")), slots) : null,
    more > 0 ? el("p", { class: "muted" }, `and ${more} more slots (see debug/plans/${plan.gang})`) : null,
    plan.notes.length ? el("ul", { class: "notes" }, plan.notes.slice(-5).map((n) => el("li", {}, n))) : null);
}

function drawNotices(topologies, tree) {
  const notices = Object.entries(topologies.errors).map(([name, error]) =>
    el("p", { class: "warning" }, `topology ${name}: ${error}`));
  if (tree && Object.keys(tree.excluded).length) {
    const parts = Object.entries(tree.excluded).map(([why, n]) => `${n} ${why}`);
    notices.push(el("p", { class: "muted" }, `nodes outside ${tree.name}: ${parts.join(", ")}`));
  }
  return notices;
}

// Leaf groups (segments) get a colour each, in slot order; other groups stay grey.
function segmentColours(plan) {
  const colours = {};
  if (plan) for (const s of plan.slots) {
    if (s.group && !(s.group in colours)) colours[s.group] = PALETTE[Object.keys(colours).length % PALETTE.length];
  }
  return colours;
}

// What the selected plan puts where: node name -> its slots, domain id -> the groups confined to it
// (a group on one node has level "node" and the node's name as its domain).
function planMarks(plan, colours) {
  const nodes = {}, domains = {}, onNode = {};
  for (const s of plan.slots) if (s.node) (nodes[s.node] = nodes[s.node] || []).push(s);
  for (const g of plan.groups) {
    const index = g.level === "node" ? onNode : domains;
    if (g.domain) (index[g.domain] = index[g.domain] || []).push(g.group);
  }
  return { nodes, domains, onNode, colours };
}

function drawDomain(domain, depth, marks, unit) {
  if (domain.nodes && domain.nodes.length === 1 && domain.nodes[0].node === domain.value) {
    return drawNode(domain.nodes[0], marks, unit, domain.id);    // a host level: the domain is the node
  }
  const groups = marks.domains[domain.id];
  return el("div", { class: `domain depth-${depth}${groups ? " in-plan" : ""}`, "data-domain": domain.id },
    el("div", { class: "domain-head" },
      el("span", { class: "level", title: domain.level }, domain.level.split("/").pop()), " ",
      el("span", { class: "domain-name" }, domain.value)),
    summary(domain, view.resource, unit),
    groups ? el("div", { class: "plan-tag" }, groups.map((g) => chip(g, marks.colours))) : null,
    domain.children ? el("div", { class: "children" }, domain.children.map((c) => drawDomain(c, depth + 1, marks, unit)))
      : el("div", { class: "nodes", style: `--columns: ${Math.ceil(Math.sqrt(domain.nodes.length))}` },
        domain.nodes.map((n) => drawNode(n, marks, unit))));
}

function drawNode(node, marks, unit, domainId = null) {
  const r = view.resource;
  const slots = marks.nodes[node.node];
  const flags = [!node.ready && "not ready", !node.schedulable && "cordoned", node.taints.length && "tainted"]
    .filter(Boolean);
  const title = [`${node.node}: ${amount(node.free[r], unit)} of ${amount(node.allocatable[r], unit)} ${r} free`,
    `used ${amount(node.used[r], unit)}, reserved ${amount(node.reserved[r], unit)}, ${node.pods} pods`,
    ...node.taints.map((t) => `taint ${t}`), ...node.reservations.map((k) => `reservation ${k}`)].join("\n");
  const colour = slots && marks.colours[slots[0].group];
  const classes = ["node", flags.length && "unusable", slots && "in-plan",
    (marks.domains[domainId] || marks.onNode[node.node]) && "domain-in-plan"];
  return el("div", { class: classes.filter(Boolean).join(" "), "data-node": node.node, "data-domain": domainId,
    title, style: colour ? `--segment: ${colour}` : null },
    el("div", { class: "node-head" }, el("span", { class: "node-name" }, node.node),
      flags.map((f) => el("span", { class: "flag" }, f))),
    usage(node, r, unit),
    slots ? el("div", { class: "slots" }, slots.map((s) =>
      el("span", { class: `slot ${s.status}`, title: `${s.slot} (${s.group}): ${s.status}${s.pod ? ", pod " + s.pod : ""}`,
        style: `--segment: ${marks.colours[s.group] || "#64748b"}` }, s.slot))) : null);
}

// One cell per unit for a node's small whole amounts (GPUs), else a stacked bar.
function usage(figures, r, unit, cells = true) {
  const total = figures.allocatable[r];
  const parts = [["used", figures.used[r]], ["reserved", figures.reserved[r]], ["free", figures.free[r]]];
  if (cells && unit === "units" && total <= CELL_LIMIT) {
    return el("div", { class: "cells" }, parts.flatMap(([kind, n]) =>
      Array.from({ length: Math.max(0, n) }, () => el("i", { class: `cell ${kind}` }))));
  }
  return el("div", { class: "bar" }, parts.map(([kind, n]) =>
    el("i", { class: kind, style: `width: ${total > 0 ? (100 * Math.max(0, n)) / total : 0}%` })));
}

function summary(figures, r, unit) {
  const unusable = figures.unusable ? figures.unusable[r] : 0;
  return el("span", { class: "summary" }, usage(figures, r, unit, false),
    el("span", { class: "muted", title: "free capacity on Ready, schedulable, untainted nodes; the rest apart" },
      `${amount(figures.free[r], unit)} usable free of ${amount(figures.allocatable[r], unit)}` +
      (unusable > 0 ? ` (+${amount(unusable, unit)} on NotReady, cordoned or tainted nodes)` : "")));
}

function chip(group, colours) {
  const colour = colours[group];
  return el("span", { class: colour ? "chip segment" : "chip", style: colour ? `--segment: ${colour}` : null },
    group || "—");
}

function amount(value, unit) {
  if (unit === "millicores") return `${+(value / 1000).toFixed(1)}`;
  if (unit === "bytes") return `${+(value / 2 ** 30).toFixed(1)}Gi`;
  return String(value);
}

function fill(id, children) {
  document.getElementById(id).replaceChildren(...children.filter((c) => c !== null));
}

function enc(text) { return encodeURIComponent(text); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(2)) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

refresh();
