// The debug page: reads the debug API every few seconds and redraws the gangs and the topology tree.
// State that survives a reload (selected gang, topology, resource) lives in the URL hash; what the user
// opened (tree domains, folded reasons) and the scroll position are kept across redraws and, in
// sessionStorage, across a reload of the tab.
"use strict";

// ?refresh=N seconds (default 3); below 1 s it is clamped to 1 s and the header says so
const ASKED_REFRESH = Number(new URLSearchParams(location.search).get("refresh")) || 3;
const REFRESH_MS = 1000 * Math.max(1, ASKED_REFRESH);
const FOLD_CHARS = 180;             // longer refusal texts fold: their first words, then a click for the rest
const CELL_LIMIT = 16;              // nodes with more units than this get a bar instead of one cell per unit
const SLOT_LIMIT = 64;              // slots listed in the gang detail
const PALETTE = ["#2563eb", "#db2777", "#0d9488", "#9333ea", "#ea580c", "#65a30d", "#0891b2", "#be123c"];
const WAITING = ["refused", "unplanned", "pending"];
// larger topologies open as an overview (two levels, heat strips), expand on click; ?full draws every node
const FULL_TREE_NODES = new URLSearchParams(location.search).has("full") ? Infinity : 512;

const advice = {};                  // gang -> its what-if answer (asked for by a click; it changes nothing)
const view = Object.fromEntries(new URLSearchParams(location.hash.slice(1)));   // gang, topology, resource
let lastDrawn = "";
let lastData = null;
const KEPT = "tas-extender-ui";     // sessionStorage key of what the user opened
const kept = JSON.parse(sessionStorage.getItem(KEPT) || "{}");
const expanded = new Set(kept.expanded || []);   // domain ids opened in the overview
const opened = new Set(kept.opened || []);       // folded reasons the user unfolded, by gang
let restoreScroll = kept.scroll || null;         // [x, y] of the tab before a reload
const answers = {};                 // url -> {etag, data}: unchanged data comes back as 304
let focus = null;                   // a selector ([data-node=...] or [data-domain=...]) to bring into view
let outlined = null;                // the search hit last brought into view: stays outlined
let advised = null;                 // the gang whose what-if advice the tree marks (the last asked)
const NAME_CHARS = { node: 11, domain: 28, gang: 30, tag: 18, hit: 48 };   // longer names shorten, in the middle
let scrolledFor = null;             // the gang whose domains were last brought into view

// ---- fetching --------------------------------------------------------------------------------------

async function getJSON(path) {
  const known = answers[path];
  const response = await fetch(path, { cache: "no-store", headers: known ? { "If-None-Match": known.etag } : {} });
  if (response.status === 304 && known) return known.data;
  if (!response.ok) {
    let detail = "";
    try { detail = (await response.json()).detail || ""; } catch (_) { /* not JSON */ }
    throw new Error(`${path}: HTTP ${response.status} ${detail}`.trim());
  }
  const data = await response.json();
  const etag = response.headers.get("ETag");
  if (etag) answers[path] = { etag, data };
  return data;
}

// The overview: the top two levels, then each expanded domain two levels deep, spliced in place.
async function loadTree(name, plan) {
  const base = `debug/topology/${enc(name)}?resource=${enc(view.resource)}`;
  if (plan && plan.topology === name && view.gang !== scrolledFor) {
    for (const g of plan.groups) if (g.domain && g.level !== "node") openPath(g.domain.split("/"));
  }
  const ids = [...expanded].sort();
  const [top, ...parts] = await Promise.all([getJSON(`${base}&depth=2`),
    ...ids.map((id) => getJSON(`${base}&domain=${enc(id)}&depth=2`).catch(() => null))]);
  const byId = {};
  parts.forEach((part, i) => { if (part) byId[ids[i]] = part.domains[0]; else expanded.delete(ids[i]); });
  const splice = (d) => {
    const c = { ...(d.collapsed !== undefined && byId[d.id] ? byId[d.id] : d) };
    if (c.children) c.children = c.children.map(splice);
    return c;
  };
  return { ...top, overview: true, domains: top.domains.map(splice) };
}

// Open every domain on a path of ids ("zone/block/rack" prefixes), for a search hit or a selected gang.
function openPath(parts) {
  for (let i = 1; i <= parts.length; i++) expanded.add(parts.slice(0, i).join("/"));
}

async function load() {
  const [plans, topologies] = await Promise.all([getJSON("debug/plans"), getJSON("debug/topology")]);
  // gangs kube-scheduler refused in its own filters have no plan: they are listed, and advised, all the same
  plans.plans = plans.plans.concat(plans.unplanned || []);
  const gangs = new Set(plans.plans.map((p) => p.gang));
  if (view.gang && !gangs.has(view.gang)) {
    // a link may name the workload (#gang=team-a%2Fllama) rather than its gang (team-a/pg-llama-<uid>)
    const named = plans.plans.find((p) => `${p.namespace}/${p.workload}` === view.gang);
    if (named) {
      view.gang = named.gang;
      history.replaceState(null, "", "#" + new URLSearchParams(view));
    } else {
      delete view.gang;                                               // the gang went away
    }
  }
  const names = topologies.topologies.map((t) => t.name);
  const selected = plans.plans.find((p) => p.gang === view.gang);
  if (!names.includes(view.topology)) {
    view.topology = [selected && selected.topology, "default", names[0]].find((n) => names.includes(n));
  }
  if (!topologies.resources.includes(view.resource)) view.resource = defaultResource(topologies.resources);
  const plan = view.gang && selected && selected.status !== "unplanned"
    ? await getJSON(`debug/plans/${view.gang.split("/").map(enc).join("/")}`) : null;
  const info = topologies.topologies.find((t) => t.name === view.topology);
  let tree = null;
  if (info && info.nodes > FULL_TREE_NODES) tree = await loadTree(view.topology, plan);
  else if (view.topology) tree = await getJSON(`debug/topology/${enc(view.topology)}?resource=${enc(view.resource)}`);
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
    const scroll = restoreScroll || [window.scrollX, window.scrollY];
    if (draw()) window.scrollTo(...scroll);       // a rebuilt DOM keeps the place the user scrolled to
    restoreScroll = null;
    afterDraw();
    showError(null);
    document.getElementById("updated").textContent = new Date().toLocaleTimeString() +
      (ASKED_REFRESH < 1 ? " · refresh clamped to 1 s" : "");
  } catch (error) {
    showError(error);
  } finally {
    document.getElementById("pulse").classList.remove("on");
    busy = false;
    timer = setTimeout(refresh, again ? 0 : REFRESH_MS);
    again = false;
  }
}

function afterDraw() {
  if (!document.body.dataset.rendered) document.body.dataset.rendered = String(Math.round(performance.now()));
  if (focus) {
    const hit = document.querySelector(focus);
    if (hit) {
      hit.scrollIntoView({ block: "center" });
      outlined = focus;
      focus = null;
    }
  }
  if (outlined) for (const hit of document.querySelectorAll(outlined)) hit.classList.add("found");
  keep();
  if (view.gang && view.gang !== scrolledFor) {
    const first = document.querySelector(".domain.in-plan, .node.in-plan");
    if (first) {
      first.scrollIntoView({ block: "center" });
      scrolledFor = view.gang;
    }
  }
}

async function search(event) {
  event.preventDefault();
  const q = document.getElementById("search").value.trim();
  const box = document.getElementById("results");
  if (!q) { box.replaceChildren(); return; }
  try {
    const found = await getJSON(`debug/search?q=${enc(q)}&topology=${enc(view.topology || "")}`);
    // path: the ids of the domains holding the node, top first (the last one is the node's own)
    const goTo = (name, path) => () => { path.slice(0, -1).forEach((id) => expanded.add(id)); focus = nodeAt(name); refresh(); };
    const goToDomain = (d) => () => {
      if (d.topology !== view.topology) select({ topology: d.topology });
      d.path.slice(0, -1).forEach((id) => expanded.add(id));
      focus = `[data-domain="${CSS.escape(d.domain)}"]`;
      refresh();
    };
    const items = [
      ...(found.domains || []).map((d) => el("button", { class: "hit domain-hit", onclick: goToDomain(d), title: `${d.level} ${d.domain} (${d.topology})` },
        `${d.level} ${short(d.domain.split("/").pop(), NAME_CHARS.hit)}`)),
      ...found.gangs.map((g) => el("button", { class: "hit gang-hit", onclick: () => select({ gang: g.gang, topology: g.topology || view.topology }),
        title: `gang ${g.workload} (${g.gang})` }, `gang ${short(g.workload, NAME_CHARS.hit)}`)),
      ...found.nodes.map((n) => el("button", { class: "hit node-hit", onclick: goTo(n.node, n.path), title: `node ${n.node}` },
        `node ${short(n.node, NAME_CHARS.hit)}`)),
      ...found.pods.map((p) => el("button", { class: "hit pod-hit", onclick: goTo(p.node, p.path), title: `pod ${p.pod} on ${p.node}` },
        `pod ${short(p.pod, NAME_CHARS.hit)} on ${short(p.node, NAME_CHARS.node)}`)),
    ];
    box.replaceChildren(...(items.length ? items : [el("span", { class: "muted" }, `nothing matches "${q}"`)]));
  } catch (error) {
    showError(error);
  }
}

function toggle(id) {
  if (expanded.has(id)) {
    for (const open of [...expanded]) if (open === id || open.startsWith(id + "/")) expanded.delete(open);
  } else {
    openPath(id.split("/"));
  }
  refresh();
}

function nodeAt(name) { return `[data-node="${CSS.escape(name)}"]`; }

// What the user opened and where the tab is scrolled, for a reload of the tab.
function keep() {
  sessionStorage.setItem(KEPT, JSON.stringify({ expanded: [...expanded], opened: [...opened],
    scroll: [window.scrollX, window.scrollY] }));
}
window.addEventListener("pagehide", keep);

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

// Rebuilds the page from lastData; false when nothing changed (the DOM, and any hover, is kept as is).
function draw() {
  const snapshot = JSON.stringify([lastData, view]);
  if (snapshot === lastDrawn) return false;
  lastDrawn = snapshot;
  const { plans, topologies, tree, plan } = lastData;
  const colours = segmentColours(plan);
  fill("counts", drawCounts(plans));
  fill("gangs", drawGangs(plans.plans, plan, colours, plans.now));
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
    return true;
  }
  const marks = plan && plan.topology === tree.name ? planMarks(plan, colours) : { nodes: {}, domains: {}, onNode: {} };
  marks.placed = placedGangs(plans.plans, tree.name);
  marks.advice = adviceMarks(plans.plans, tree.name);
  const unit = tree.units[view.resource];
  treeBox.replaceChildren(el("div", { class: "children" },
    tree.domains.map((d) => drawDomain(d, 0, marks, unit, Boolean(tree.overview)))));
  for (const box of treeBox.querySelectorAll(".children")) {     // children that are all nodes: a square grid
    if ([...box.children].every((c) => c.classList.contains("node"))) {
      box.className = "nodes";
      box.style.setProperty("--columns", Math.ceil(Math.sqrt(box.children.length)));
    }
  }
  return true;
}

function drawCounts(plans) {
  const counts = Object.entries(plans.counts).map(([status, n]) =>
    el("span", { class: `count ${status}`, title: `gangs whose status is ${status}` },
      el("b", {}, n), ` ${n === 1 ? "gang" : "gangs"} ${status}`));
  const s = plans.settings;
  return [...counts, el("span", { class: "count" }, el("b", {}, plans.reservations), " reserved slots"),
    el("span", { class: "setting" }, `${s.strategy} · ttl ${s.reservation_ttl} s · preemption ${s.preemption}`)];
}

function drawGangs(list, plan, colours, now) {
  if (!list.length) {
    return [el("p", { class: "empty" }, "No gangs yet. A gang appears here when kube-scheduler sends " +
      "its first pod to the extender's filter verb.")];
  }
  const hint = view.gang ? null : el("p", { class: "muted" }, "Select a gang to see its domains and segments on the tree.");
  const waiting = list.filter((g) => WAITING.includes(g.status));
  const placed = list.filter((g) => !WAITING.includes(g.status));
  return [hint,
    waiting.length ? el("h3", {}, `Waiting (${waiting.length})`) : null,
    ...waiting.sort((a, b) => b.priority - a.priority || a.created - b.created).map((g) => drawGang(g, plan, colours, now)),
    placed.length ? el("h3", {}, `Placed (${placed.length})`) : null, ...placed.map((g) => drawGang(g, plan, colours)),
  ];
}

function drawGang(gang, plan, colours, now) {
  const selected = gang.gang === view.gang;
  const c = gang.counts;
  return el("article", { class: `gang ${gang.status}${selected ? " selected" : ""}`, "data-gang": gang.gang },
    el("button", { class: "gang-head", title: "show this gang on the tree",
      onclick: () => select({ gang: selected ? "" : gang.gang, topology: gang.topology || view.topology }) },
      el("span", { class: `badge ${gang.status}` }, gang.status),
      el("span", { class: "gang-name", title: `${gang.workload || gang.name} (gang ${gang.gang})` },
        short(gang.workload || gang.name, NAME_CHARS.gang)),
      el("span", { class: "muted gang-namespace", title: gang.namespace }, short(gang.namespace, NAME_CHARS.tag))),
    el("div", { class: "muted" }, `${gang.kind} · ${gang.summary} · ${gang.topology || "no topology"}`),
    WAITING.includes(gang.status) ? el("div", { class: "queue" },
      `waiting ${duration(now - gang.created)} · priority ${gang.priority}`,
      gang.never_fits ? el("span", { class: "badge never" }, "can never fit") : null) : null,
    gang.status === "refused" ? null
      : gang.status === "unplanned" ? el("div", { class: "muted pods" }, `pods: ${c.pending} pending`)
      : el("div", { class: "muted pods" }, `pods: ${c.bound} bound · ${c.planned} planned · ${c.unplaced} unplaced`),
    el("div", { class: "muted internal", title: `PodGroup ${gang.name}` }, `PodGroup ${short(gang.name, NAME_CHARS.gang)}`),
    gang.reason ? reasonText(gang.reason, gang.gang) : null,
    ...gang.warnings.map((w) => el("p", { class: "warning" }, w)),
    gang.status === "unplanned" ? drawClosest(gang) : null,
    selected && plan ? drawPlan(plan, colours) : null);
}

// A long refusal folds: its first words, then the whole text on a click; unfolded, it stays so.
function reasonText(text, gang) {
  if (text.length <= FOLD_CHARS) return el("p", { class: "reason" }, text);
  const cut = text.lastIndexOf(" ", FOLD_CHARS);
  const remember = (event) => { if (event.target.open) opened.add(gang); else opened.delete(gang); keep(); };
  return el("details", { class: "reason folded", open: opened.has(gang), ontoggle: remember },
    el("summary", { title: "show the whole reason" }, text.slice(0, cut > 40 ? cut : FOLD_CHARS) + " …"),
    el("div", { class: "rest" }, text));
}

// A refused gang: the domains that came closest and what each lacks, and on a click what would make it fit.
function drawClosest(plan) {
  if (plan.status !== "refused" && plan.status !== "unplanned") return null;
  const known = advice[plan.gang];
  const ask = async () => {
    advice[plan.gang] = { verdict: "asking", text: "searching…" };
    lastDrawn = ""; draw();
    try {
      advice[plan.gang] = await (await fetch(`debug/whatif/${plan.gang.split("/").map(enc).join("/")}`)).json();
    } catch (error) {
      advice[plan.gang] = { verdict: "error", text: String(error) };
    }
    advised = plan.gang;
    const domain = advice[plan.gang].domain;
    if (domain) {                         // open the advised domain and bring it into view
      openPath(domain.split("/"));
      focus = `[data-domain="${CSS.escape(domain)}"]`;
    }
    lastDrawn = ""; refresh();
  };
  return el("div", { class: "closest" },
    (plan.closest || []).length ? [el("h4", {}, "Closest domains"),
      el("ul", {}, plan.closest.map((c) => el("li", { "data-closest": c.domain }, c.text)))] : null,
    known ? el("div", { class: `advice ${known.verdict}` }, el("b", {}, "What would make it fit: "), known.text || known.detail,
      (known.victims || []).length ? el("ul", {}, known.victims.slice(0, 8).map((v) =>
        el("li", { class: "victim-item", title: `evict ${v.pod} on ${v.node} (priority ${v.priority})` },
          `evict ${short(v.pod, NAME_CHARS.hit)} on ${short(v.node, NAME_CHARS.hit)} (priority ${v.priority})`)),
        known.victims.length > 8 ? el("li", {}, `and ${known.victims.length - 8} more`) : null) : null)
      : el("button", { class: "ask", onclick: ask }, "What would make it fit?"));
}

// What the last asked what-if advice names, for the tree: its domain, and node -> the pods it would evict.
function adviceMarks(list, topology) {
  const known = advised && advice[advised];
  const gang = known && list.find((g) => g.gang === advised);
  if (!known || !gang || gang.topology !== topology) return { domain: null, victims: {} };
  const victims = {};
  for (const v of known.victims || []) (victims[v.node] = victims[v.node] || []).push(v);
  return { domain: known.domain || null, victims, gang: advised };
}

// Where placed gangs are: domain id -> the gangs whose groups are confined to it (planned and bound).
function placedGangs(list, topology) {
  const at = {};
  for (const gang of list) {
    if (WAITING.includes(gang.status) || gang.topology !== topology) continue;
    const domains = new Set(gang.groups.filter((g) => g.domain && g.level !== "node").map((g) => g.domain));
    for (const d of domains) (at[d] = at[d] || []).push(gang);
  }
  return at;
}

// The placed gangs inside a domain (confined to it or to a domain below it).
function gangsWithin(placed, id) {
  const found = new Map();
  for (const [domain, gangs] of Object.entries(placed)) {
    if (domain === id || domain.startsWith(id + "/")) for (const g of gangs) found.set(g.gang, g);
  }
  return [...found.values()];
}

function gangTags(gangs) {
  if (!gangs.length) return null;
  const shown = gangs.slice(0, 4).map((g) => el("button", { class: `gang-tag ${g.status}`,
    title: `${g.workload || g.name}: gang ${g.gang} (${g.status}): select`,
    onclick: (e) => { e.stopPropagation(); select({ gang: g.gang, topology: g.topology || view.topology }); } },
    short(g.workload || g.name, NAME_CHARS.tag)));
  return el("div", { class: "gang-tags" }, shown, gangs.length > 4 ? el("span", { class: "muted" }, `+${gangs.length - 4}`) : null);
}

// Whole free units: the share of a domain's GPU (else cpu) nodes entirely free, on the same red-green scale.
function wholeShare(w) { return w && w.nodes > 0 ? w.free_nodes / w.nodes : 0; }

function wholeText(w) {
  if (!w || !w.nodes) return "";
  const children = w.children !== undefined ? ` · ${w.free_children}/${w.children} ${w.child_level.split("/").pop()} whole` : "";
  return `${w.free_nodes}/${w.nodes} nodes whole free${children}`;
}

function drawPlan(plan, colours) {
  const slots = plan.slots.slice(0, SLOT_LIMIT).map((s) =>
    el("tr", {}, el("td", {}, chip(s.group, colours)), el("td", {}, s.slot),
      el("td", { title: s.node || "" }, s.node ? short(s.node, NAME_CHARS.tag) : "—"),
      el("td", { class: s.status }, s.status + (s.reserved ? " · reserved" : ""))));
  const more = plan.slots.length - SLOT_LIMIT;
  return el("div", { class: "plan" },
    drawClosest(plan),
    plan.groups.length ? el("table", {}, el("tr", {}, el("th", {}, "group"), el("th", {}, "level"), el("th", {}, "domain")),
      plan.groups.map((g) => el("tr", {}, el("td", {}, chip(g.group, colours)), el("td", {}, g.level || "any"),
        el("td", { title: g.domain || "" }, g.domain ? short(g.domain.split("/").pop(), NAME_CHARS.tag) : "—")))) : null,
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

function drawDomain(domain, depth, marks, unit, overview = false) {
  if (domain.nodes && domain.nodes.length === 1 && domain.nodes[0].node === domain.value) {
    return drawNode(domain.nodes[0], marks, unit, domain.id);    // a host level: the domain is the node
  }
  const groups = marks.domains[domain.id];
  const isAdvised = marks.advice && marks.advice.domain === domain.id;
  const collapsed = domain.collapsed !== undefined;
  const head = el("div", { class: "domain-head" },
    el("span", { class: "level", title: domain.level }, domain.level.split("/").pop()), " ",
    el("span", { class: "domain-name", title: `${domain.level.split("/").pop()} ${domain.id}` },
      short(domain.value, NAME_CHARS.domain)),
    isAdvised ? el("span", { class: "advice-tag", title: `what-if advice for ${marks.advice.gang}: fits here after the evictions` }, "what-if") : null,
    collapsed ? el("span", { class: "muted" }, ` · ${domain.collapsed} inside`) : null);
  const opener = overview && depth > 0
    ? el("button", { class: "opener", title: collapsed ? "expand" : "collapse", "aria-expanded": String(!collapsed),
      onclick: () => toggle(domain.id) }, collapsed ? "▸" : "▾", head)
    : head;
  let body;
  if (collapsed) body = heatStrip(domain, unit, marks.placed, marks.advice && marks.advice.domain);
  else if (domain.children) {
    body = el("div", { class: "children" }, domain.children.map((c) => drawDomain(c, depth + 1, marks, unit, overview)));
  } else {
    body = el("div", { class: "nodes", style: `--columns: ${Math.ceil(Math.sqrt(domain.nodes.length))}` },
      domain.nodes.map((n) => drawNode(n, marks, unit)));
  }
  const w = domain.whole;
  return el("div", { class: `domain depth-${depth}${groups ? " in-plan" : ""}${collapsed ? " collapsed" : ""}${isAdvised ? " advised" : ""}`,
    "data-domain": domain.id, "data-whole": w ? `${w.free_nodes}/${w.nodes}` : null,
    style: `--whole: ${wholeShare(w).toFixed(3)}` },
    opener, w && w.nodes ? el("span", { class: "whole", title: `whole free ${w.unit} nodes (every ${w.unit} free, ` +
      `node usable)${w.children !== undefined ? "; and whole free domains one level down" : ""}` }, wholeText(w)) : null,
    summary(domain, view.resource, unit),
    gangTags(gangsWithin(marks.placed || {}, domain.id)),
    groups ? el("div", { class: "plan-tag" }, groups.map((g) => chip(g, marks.colours))) : null,
    body);
}

// A collapsed domain: one cell per child, coloured by its share of whole free nodes (red none, green all:
// a child green only when whole nodes are free, not when every node has a GPU or two left); a dot marks a
// child holding a placed gang.
function heatStrip(domain, unit, placed, adviceDomain = null) {
  const r = view.resource;
  return el("div", { class: "strip" }, domain.strip.map((c) => {
    const share = wholeShare(c.whole);
    const gangs = gangsWithin(placed || {}, c.id);
    const holdsAdvice = adviceDomain && (adviceDomain === c.id || adviceDomain.startsWith(c.id + "/"));
    return el("i", { class: `heat${gangs.length ? " has-gang" : ""}${holdsAdvice ? " advised" : ""}`, "data-child": c.id, style: `--share: ${share.toFixed(3)}`,
      title: `${c.value}: ${wholeText(c.whole)}; ${amount(c.free[r], unit)} of ${amount(c.allocatable[r], unit)} ${r} usable free` +
        (gangs.length ? `\ngangs: ${gangs.map((g) => g.workload || g.name).join(", ")}` : "") });
  }));
}

function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function drawNode(node, marks, unit, domainId = null) {
  const r = view.resource;
  const slots = marks.nodes[node.node];
  const victims = (marks.advice && marks.advice.victims[node.node]) || [];
  const flags = [!node.ready && "not ready", !node.schedulable && "cordoned", node.taints.length && "tainted"]
    .filter(Boolean);
  const title = [`${node.node}: ${amount(node.free[r], unit)} of ${amount(node.allocatable[r], unit)} ${r} free`,
    `used ${amount(node.used[r], unit)}, reserved ${amount(node.reserved[r], unit)}, ${node.pods} pods`,
    ...node.taints.map((t) => `taint ${t}`), ...node.reservations.map((k) => `reservation ${k}`),
    ...victims.map((v) => `what-if: evict ${v.pod} (priority ${v.priority})`),
    ...(node.holders || []).map((p) => `pod ${p}`),
    node.pods > (node.holders || []).length ? `and ${node.pods - node.holders.length} more pods` : ""]
    .filter(Boolean).join("\n");
  const colour = slots && marks.colours[slots[0].group];
  const classes = ["node", flags.length && "unusable", slots && "in-plan", node.whole_free && "whole-free",
    (marks.domains[domainId] || marks.onNode[node.node]) && "domain-in-plan", victims.length && "victim"];
  return el("div", { class: classes.filter(Boolean).join(" "), "data-node": node.node, "data-domain": domainId,
    title, style: colour ? `--segment: ${colour}` : null },
    el("div", { class: "node-head" }, el("span", { class: "node-name" }, short(node.node, NAME_CHARS.node)),
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
  return el("span", { class: colour ? "chip segment" : "chip", style: colour ? `--segment: ${colour}` : null,
    title: group || null }, group ? short(group, NAME_CHARS.tag) : "—");
}

// A name longer than `limit` characters keeps its start and its end (where names differ: node-a-0123),
// joined by "…"; the element showing it carries the full name as its title.
function short(name, limit) {
  const text = String(name ?? "");
  if (text.length <= limit) return text;
  const tail = Math.floor((limit - 1) / 2);
  return text.slice(0, limit - 1 - tail) + "…" + text.slice(text.length - tail);
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

document.getElementById("search-form").addEventListener("submit", search);
refresh();
