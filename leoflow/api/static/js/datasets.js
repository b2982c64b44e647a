// Datasets on the dashboard: the lineage graph (which DAG feeds which, through which URI) and, on
// a DAG that runs on datasets, why it has not started yet. Both read GET /api/v2/datasets, whose
// entries list a URI's producers (DAG and task), consumers and the events queued per consumer.

import { h } from "./dom.js";
import { timeEl } from "./format.js";
import { taskGraph } from "./graph.js";

/** A URI's node id in the lineage graph: marked, so a URI that reads like a DAG id stays apart. */
export function uriNode(uri) {
  return `◆ ${uri}`;
}

/**
 * The lineage as graph nodes: a DAG depends on the URIs it consumes, a URI on the DAGs that
 * produce it. A URI nobody produces is a source (outside events only); a cycle is drawn as it is.
 */
export function lineageNodes(datasets) {
  const nodes = new Map();
  const node = (id) => {
    if (!nodes.has(id)) nodes.set(id, { id, depends_on: [] });
    return nodes.get(id);
  };
  for (const d of datasets) {
    const uri = node(uriNode(d.uri));
    for (const p of d.producers || []) {
      node(p.dag_id);
      if (!uri.depends_on.includes(p.dag_id)) uri.depends_on.push(p.dag_id);
    }
    for (const dagId of d.consumers || []) node(dagId).depends_on.push(uriNode(d.uri));
  }
  return [...nodes.values()];
}

/** The lineage graph: DAG nodes link to their page, URI nodes are drawn as datasets. */
export function lineageGraph(datasets, { linkFor }) {
  const nodes = lineageNodes(datasets);
  if (!nodes.length) return h("p", { class: "muted" }, "No DAG produces or waits on a dataset yet.");
  const states = new Map(nodes.filter((n) => n.id.startsWith("◆ ")).map((n) => [n.id, "dataset"]));
  const graph = taskGraph(nodes, { states, linkFor: (id) => (states.has(id) ? null : linkFor(id)) });
  graph.dataset.testid = "lineage-graph";
  return graph;
}

function codeList(uris, max = 3) {
  const shown = uris.slice(0, max).flatMap((u, i) => [i ? ", " : "", h("code", {}, u)]);
  return uris.length > max ? [...shown, ` and ${uris.length - max} more`] : shown;
}

/**
 * Why a DAG that runs on datasets has not started: which URIs it still waits for ("1 of 2
 * datasets updated"), or that its events wait for its unfinished dataset run, or for an unpause.
 * `datasets`: GET /datasets?dag_id= (its URIs, with their queues); `runs`: its recent runs.
 * Null for a DAG without a dataset schedule.
 */
export function datasetWait(dag, datasets, runs) {
  const condition = dag.schedule && typeof dag.schedule === "object" ? dag.schedule.datasets : null;
  if (!condition || typeof condition !== "object") return null;
  const mode = Array.isArray(condition.all) ? "all" : "any";
  const uris = [].concat(condition[mode] || []);
  const byUri = new Map(datasets.map((d) => [d.uri, d]));
  const updated = uris.filter((u) => (byUri.get(u)?.queued || []).some((q) => q.dag_id === dag.dag_id));
  const missing = uris.filter((u) => !updated.includes(u));
  const orphans = uris.filter((u) => byUri.get(u)?.no_producer);
  const unfinished = runs.find((r) => r.run_type === "dataset" && (r.state === "queued" || r.state === "running"));
  const count = `${updated.length} of ${uris.length} dataset${uris.length === 1 ? "" : "s"} updated`;
  let why;
  const slot = dag.pending_slot;
  if (dag.schedule.combine === "and" && !dag.paused && !slot) {
    // A cron AND datasets: without a pending slot, events wait for the next cron slot.
    why = [`${count}; the next run starts at the next slot of `, h("code", {}, dag.schedule.cron),
      " once every condition is met (", timeEl(dag.next_run_at), ")."];
  } else if (dag.schedule.combine === "and" && !dag.paused && (mode === "all" ? missing.length : !updated.length)) {
    why = ["Waiting for ", ...codeList(mode === "all" ? missing : uris), " since the ", timeEl(slot.logical_date, { relative: false }),
      ` slot: ${count}.`];
  } else if (dag.paused) {
    why = [`Paused: events are held (${count}); the run starts once it is unpaused.`];
  } else if (unfinished && updated.length) {
    why = [`${count}; the next run starts when dataset run `, h("code", {}, unfinished.run_id),
      " ends (one unfinished dataset run at a time)."];
  } else if (mode === "all" && missing.length) {
    why = ["Waiting for ", ...codeList(missing), `: ${count}.`];
  } else if (mode === "any" && !updated.length) {
    why = ["Waiting for an event of ", uris.length > 1 ? "any of " : "", ...codeList(uris), "."];
  } else {
    why = [`Condition met (${count}): the leader starts the run now.`];
  }
  const note = orphans.length
    ? h("span", { class: "muted" }, " No DAG produces ", ...codeList(orphans), ": only outside events update it.")
    : null;
  return h("span", { "data-testid": "dataset-wait" }, ...why, note);
}
