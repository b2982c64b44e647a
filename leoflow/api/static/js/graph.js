// The task graph of a DAG as SVG: layered left-to-right layout from depends_on.
//
// Layout: a task's column is the length of the longest dependency path leading to it, so every
// edge points right; rows inside a column are ordered by the mean row of the upstream tasks
// (two barycentre sweeps), which keeps the usual fan-out/fan-in shapes free of crossings.

import { h, s } from "./dom.js";

const NODE_H = 30;
const GAP_X = 56;
const GAP_Y = 14;
const PAD = 8;
const CHAR_W = 7.2;
const MAX_LABEL = 26;

export function taskId(task) {
  return task.id ?? task.task_id;
}

export function dependsOn(task) {
  return Array.isArray(task.depends_on) ? task.depends_on : [];
}

/** Tasks in dependency order (upstreams first); tasks on a cycle, if any, come last. */
export function topoOrder(tasks) {
  const byId = new Map(tasks.map((t) => [taskId(t), t]));
  const indegree = new Map(tasks.map((t) => [taskId(t), dependsOn(t).filter((d) => byId.has(d)).length]));
  const downstream = new Map(tasks.map((t) => [taskId(t), []]));
  for (const t of tasks) for (const d of dependsOn(t)) if (downstream.has(d)) downstream.get(d).push(taskId(t));
  const queue = tasks.filter((t) => indegree.get(taskId(t)) === 0).map(taskId);
  const order = [];
  while (queue.length) {
    const id = queue.shift();
    order.push(id);
    for (const next of downstream.get(id)) {
      indegree.set(next, indegree.get(next) - 1);
      if (indegree.get(next) === 0) queue.push(next);
    }
  }
  for (const t of tasks) if (!order.includes(taskId(t))) order.push(taskId(t));
  return order;
}

function layout(tasks) {
  const byId = new Map(tasks.map((t) => [taskId(t), t]));
  const order = topoOrder(tasks);
  const rank = new Map();
  for (const id of order) {
    const ups = dependsOn(byId.get(id)).filter((d) => rank.has(d));
    rank.set(id, ups.length ? Math.max(...ups.map((d) => rank.get(d))) + 1 : 0);
  }
  const columns = [];
  for (const id of order) (columns[rank.get(id)] ||= []).push(id);
  const row = new Map();
  columns.forEach((col) => col.forEach((id, i) => row.set(id, i)));
  for (let sweep = 0; sweep < 2; sweep++) {
    for (const col of columns.slice(1)) {
      const key = (id) => {
        const ups = dependsOn(byId.get(id)).filter((d) => row.has(d));
        return ups.length ? ups.reduce((a, d) => a + row.get(d), 0) / ups.length : row.get(id);
      };
      col.sort((a, b) => key(a) - key(b));
      col.forEach((id, i) => row.set(id, i));
    }
  }
  const label = (id) => (id.length > MAX_LABEL ? id.slice(0, MAX_LABEL - 1) + "…" : id);
  const nodeW = Math.max(80, Math.min(...[Math.max(...order.map((id) => label(id).length)) * CHAR_W + 34, 240]));
  const tallest = Math.max(...columns.map((c) => c.length));
  const height = tallest * (NODE_H + GAP_Y) - GAP_Y + 2 * PAD;
  const pos = new Map();
  columns.forEach((col, c) => {
    const offset = ((tallest - col.length) * (NODE_H + GAP_Y)) / 2;
    col.forEach((id, r) => pos.set(id, { x: PAD + c * (nodeW + GAP_X), y: PAD + offset + r * (NODE_H + GAP_Y) }));
  });
  const width = columns.length * (nodeW + GAP_X) - GAP_X + 2 * PAD;
  return { byId, order, pos, nodeW, width, height, label };
}

/**
 * The graph as an <svg> inside a scrolling box. states: Map task_id -> state (colours);
 * linkFor(task_id) -> hash link or null.
 */
export function taskGraph(tasks, { states = new Map(), linkFor = () => null } = {}) {
  if (!tasks.length) return h("p", { class: "muted" }, "This DAG has no tasks.");
  const g = layout(tasks);
  const edges = [];
  for (const id of g.order) {
    for (const up of dependsOn(g.byId.get(id))) {
      const a = g.pos.get(up);
      const b = g.pos.get(id);
      if (!a || !b) continue;
      const x1 = a.x + g.nodeW;
      const y1 = a.y + NODE_H / 2;
      const x2 = b.x - 3;
      const y2 = b.y + NODE_H / 2;
      const mid = (x1 + x2) / 2;
      edges.push(s("path", { class: "edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
        "marker-end": "url(#arrow)", "data-edge": `${up}->${id}` }));
    }
  }
  const nodes = g.order.map((id) => {
    const { x, y } = g.pos.get(id);
    const state = states.get(id) || "none";
    const node = s("g", { class: `node st-${state}`, transform: `translate(${x},${y})`, "data-task": id },
      s("title", {}, `${id}${state !== "none" ? ` — ${state}` : ""}`),
      s("rect", { width: g.nodeW, height: NODE_H, rx: 6 }),
      s("circle", { class: "node-dot", cx: 13, cy: NODE_H / 2, r: 5 }),
      s("text", { x: 24, y: NODE_H / 2 + 4.5 }, g.label(id)));
    const link = linkFor(id);
    return link ? s("a", { href: link }, node) : node;
  });
  return h("div", { class: "graph-wrap", "data-testid": "task-graph" },
    s("svg", { width: g.width, height: g.height, viewBox: `0 0 ${g.width} ${g.height}`, role: "img",
      "aria-label": "Task dependency graph" },
      s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))),
      edges, nodes));
}
