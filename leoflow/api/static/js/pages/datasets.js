// Datasets: the lineage graph (which DAG feeds which, through which URI) and every URI with its
// producers ("no producer": outside events only), consumers, last event and the events queued per
// consumer (coalesced: one entry per DAG, however many events). A team's reader sees only what
// its DAGs produce or consume (the API filters).

import { api, items } from "../api.js";
import { fill, h, href } from "../dom.js";
import { lineageGraph } from "../datasets.js";
import { timeEl } from "../format.js";
import { changeGate, notice, section, table } from "../ui.js";

/** Pages read for one view: the lineage of up to 2,000 URIs (a view, not an export). */
const MAX_PAGES = 20;

async function allDatasets() {
  const found = [];
  let cursor = null;
  for (let page = 0; page < MAX_PAGES; page++) {
    const answer = await api("/datasets", { query: { limit: 100, ...(cursor ? { cursor } : {}) } });
    found.push(...items(answer));
    cursor = answer.next_cursor;
    if (!cursor) break;
  }
  return found;
}

const dagLink = (dagId) => h("a", { href: href("dags", dagId), class: "mono" }, dagId);

function producers(d) {
  if (d.no_producer) return h("span", { class: "badge", title: "Only outside events update it" }, "no producer");
  return h("span", {}, ...d.producers.flatMap((p, i) => [i ? ", " : "", dagLink(p.dag_id), `.${p.task_id}`]));
}

function lastEvent(d) {
  const e = d.last_event;
  if (!e) return h("span", { class: "muted" }, "none yet");
  const from = e.source === "task" && e.dag_id ? [" by ", dagLink(e.dag_id)] : [` (${e.source})`];
  return h("span", {}, timeEl(e.created_at), ...from);
}

export default {
  title: () => "Datasets",
  mount(root, _params, ctx) {
    const errors = notice();
    const lineage = section("Lineage: which DAG feeds which", { testid: "lineage" });
    const list = section("Datasets", { testid: "datasets" });
    fill(root, h("div", { class: "page-head" }, h("h1", {}, "Datasets")), errors.el, lineage.el, list.el);
    const changed = changeGate();
    return {
      async refresh() {
        const datasets = await allDatasets();
        if (!ctx.isCurrent() || !changed(datasets)) return;
        fill(lineage.body, lineageGraph(datasets, { linkFor: (dagId) => href("dags", dagId) }));
        fill(list.body, table([
          { title: "URI", cell: (d) => h("code", {}, d.uri) },
          { title: "Producers", cell: producers },
          { title: "Consumers", cell: (d) => h("span", {}, ...d.consumers.flatMap((c, i) => [i ? ", " : "", dagLink(c)])) },
          { title: "Last event", cell: lastEvent },
          { title: "Queued", cell: (d) => d.queued.length
            ? h("span", {}, ...d.queued.flatMap((q, i) => [i ? ", " : "", `${q.dag_id}: ${q.events}`]))
            : h("span", { class: "muted" }, "—") },
        ], datasets, { empty: "No datasets: no DAG produces or waits on one.", testid: "datasets-table",
          rowAttrs: (d) => ({ "data-uri": d.uri }) }));
      },
    };
  },
};
