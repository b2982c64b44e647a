// The task graph of a DAG as SVG: layered layout from depends_on (left to right, or top to
// bottom when that fits a narrow screen better).
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

function layout(tasks, vertical) {
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
  const widest = Math.max(...columns.map((c) => c.length));
  const pos = new Map();
  if (vertical) {
    // Top to bottom (narrow screens): layers are rows, centred.
    const gapX = 14;
    const gapY = 34;
    columns.forEach((col, c) => {
      const offset = ((widest - col.length) * (nodeW + gapX)) / 2;
      col.forEach((id, r) => pos.set(id, { x: PAD + offset + r * (nodeW + gapX), y: PAD + c * (NODE_H + gapY) }));
    });
    return { byId, order, pos, nodeW, vertical, label,
      width: widest * (nodeW + gapX) - gapX + 2 * PAD, height: columns.length * (NODE_H + gapY) - gapY + 2 * PAD };
  }
  columns.forEach((col, c) => {
    const offset = ((widest - col.length) * (NODE_H + GAP_Y)) / 2;
    col.forEach((id, r) => pos.set(id, { x: PAD + c * (nodeW + GAP_X), y: PAD + offset + r * (NODE_H + GAP_Y) }));
  });
  return { byId, order, pos, nodeW, vertical, label,
    width: columns.length * (nodeW + GAP_X) - GAP_X + 2 * PAD, height: widest * (NODE_H + GAP_Y) - GAP_Y + 2 * PAD };
}

/** Top-to-bottom fits a narrow screen better than left-to-right when it is narrower. */
export function preferVertical(tasks, availableWidth) {
  if (!tasks.length || availableWidth <= 0) return false;
  const lr = layout(tasks, false);
  if (lr.width <= availableWidth) return false;
  return layout(tasks, true).width < lr.width;
}

/**
 * The graph as an <svg> inside a scrolling box. states: Map task_id -> state (colours);
 * linkFor(task_id) -> hash link or null; vertical: lay layers out top to bottom.
 */
export function taskGraph(tasks, { states = new Map(), linkFor = () => null, vertical = false } = {}) {
  if (!tasks.length) return h("p", { class: "muted" }, "This DAG has no tasks.");
  const g = layout(tasks, vertical);
  const edges = [];
  for (const id of g.order) {
    for (const up of dependsOn(g.byId.get(id))) {
      const a = g.pos.get(up);
      const b = g.pos.get(id);
      if (!a || !b) continue;
      let d;
      if (g.vertical) {
        const x1 = a.x + g.nodeW / 2;
        const y1 = a.y + NODE_H;
        const x2 = b.x + g.nodeW / 2;
        const y2 = b.y - 3;
        const mid = (y1 + y2) / 2;
        d = `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${y2}`;
      } else {
        const x1 = a.x + g.nodeW;
        const y1 = a.y + NODE_H / 2;
        const x2 = b.x - 3;
        const y2 = b.y + NODE_H / 2;
        const mid = (x1 + x2) / 2;
        d = `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`;
      }
      edges.push(s("path", { class: "edge", d,
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
