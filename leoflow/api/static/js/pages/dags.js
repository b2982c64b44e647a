// DAG list: schedule, paused toggle (admins only), last run state, next run time.

import { api, enc, items } from "../api.js";
import { fill, h, href } from "../dom.js";
import { badge, timeEl } from "../format.js";
import { changeGate, notice, table } from "../ui.js";

const LIST_LIMIT = 500;
const LAST_RUN_LOOKUPS = 50; // when the list carries no last run, ask per DAG for at most this many

/** The paused switch; read-only users get a label instead. */
export function pausedControl(dag, ctx, onError) {
  if (!ctx.canWrite) {
    return h("span", { class: dag.paused ? "tag tag-paused" : "tag tag-active", "data-testid": `paused-${dag.dag_id}` },
      dag.paused ? "paused" : "active");
  }
  const input = h("input", {
    type: "checkbox", role: "switch", checked: !dag.paused, "data-testid": `pause-toggle-${dag.dag_id}`,
    "aria-label": `${dag.dag_id} active`,
  });
  input.addEventListener("change", async () => {
    input.disabled = true;
    try {
      await api(`/dags/${enc(dag.dag_id)}`, { method: "PATCH", body: { paused: !input.checked } });
      onError("");
      await ctx.refresh();
    } catch (err) {
      input.checked = !input.checked;
      onError(`Could not ${input.checked ? "pause" : "unpause"} ${dag.dag_id}: ${err.message}`);
    } finally {
      input.disabled = false;
    }
  });
  return h("label", { class: "switch", title: dag.paused ? "Paused — click to unpause" : "Active — click to pause" },
    input, h("span", { class: "slider", "aria-hidden": "true" }),
    h("span", { class: "switch-text" }, dag.paused ? "paused" : "active"));
}

/** The last run of a DAG, from the list entry when present. */
export function lastRunOf(dag) {
  return dag.last_run || dag.latest_run || null;
}

export default {
  title: () => "DAGs",
  mount(root, _params, ctx) {
    const errors = notice();
    const body = h("div", { class: "card", "data-testid": "dags" });
    fill(root, h("div", { class: "page-head" }, h("h1", {}, "DAGs")), errors.el, body);
    const lastRuns = new Map();
    const changed = changeGate();

    return {
      async refresh() {
        const dags = items(await api("/dags", { query: { limit: LIST_LIMIT } }), "dags");
        const missing = dags.filter((d) => !("last_run" in d) && !("latest_run" in d)).slice(0, LAST_RUN_LOOKUPS);
        await Promise.all(missing.map(async (d) => {
          const runs = items(await api(`/dags/${enc(d.dag_id)}/runs`, { query: { limit: 1 } }), "runs");
          lastRuns.set(d.dag_id, runs[0] || null);
        }));
        if (!ctx.isCurrent() || !changed([dags, [...lastRuns]])) return;
        fill(body, table([
          { title: "DAG", cell: (d) => h("a", { href: href("dags", d.dag_id), class: "strong", "data-testid": `dag-link-${d.dag_id}` }, d.dag_id) },
          { title: "Schedule", cell: (d) => d.schedule ? h("code", {}, d.schedule) : h("span", { class: "muted" }, "manual") },
          { title: "Active", cell: (d) => pausedControl(d, ctx, errors.set) },
          { title: "Last run", cell: (d) => {
            const run = lastRunOf(d) || lastRuns.get(d.dag_id);
            return run ? h("a", { href: href("dags", d.dag_id, "runs", run.run_id), title: run.run_id }, badge(run.state))
              : h("span", { class: "muted" }, "never");
          } },
          { title: "Next run", cell: (d) => d.paused ? h("span", { class: "muted" }, "paused") : timeEl(d.next_run_at) },
        ], dags, { empty: "No DAGs yet. Apply one with `leoflow dags apply FILE`.", testid: "dags-table",
          rowAttrs: (d) => ({ "data-dag": d.dag_id }) }));
      },
    };
  },
};
