// One DAG: facts, paused toggle, trigger form (admins), task graph, and the recent runs grid
// (runs × tasks coloured by state) with a runs table.

import { api, enc, items } from "../api.js";
import { fill, h, href } from "../dom.js";
import { badge, fmtDuration, fmtTime, scheduleText, secondsBetween, TASK_STATES, TERMINAL_RUN_STATES, timeEl } from "../format.js";
import { dependsOn, preferVertical, taskGraph, taskId, topoOrder } from "../graph.js";
import { backfillForm, backfillsTable } from "../backfill.js";
import { datasetWait } from "../datasets.js";
import { paramsForm } from "../params.js";
import { changeGate, crumbs, fact, notice, section, table } from "../ui.js";
import { pausedControl } from "./dags.js";

const RECENT_RUNS = 20;
const GRID_RUNS = 20;

/** The task instances inside a run response, as a Map task_id -> instance. */
export function instancesOf(run) {
  const list = run.task_instances || run.tasks || run.items || [];
  return new Map(list.map((ti) => [ti.task_id, ti]));
}

/** The tasks of a DAG response: spec.tasks (or tasks at the top level). */
export function tasksOf(dag) {
  const spec = dag.spec || dag;
  return Array.isArray(spec.tasks) ? spec.tasks : [];
}

function triggerForm(dagId, ctx, errors) {
  const runId = h("input", { type: "text", name: "run_id", placeholder: "optional — generated when empty",
    spellcheck: "false", "data-testid": "trigger-run-id" });
  const conf = h("textarea", { name: "conf", rows: 4, spellcheck: "false", "data-testid": "trigger-conf" }, "{}");
  const confLabel = h("label", {}, "Conf (JSON object)", conf);
  const paramsSlot = h("div", {});
  let params = null; // the form generated from the DAG's params schema, when it has one
  let paramsKey = "";
  const message = notice();
  const submit = h("button", { type: "submit", class: "primary", "data-testid": "trigger-submit" }, "Trigger");
  // novalidate: the server checks the conf against params and names the path in its 422.
  const form = h("form", { class: "trigger-form", hidden: true, novalidate: true, "data-testid": "trigger-form" },
    h("label", {}, "Run id", runId),
    paramsSlot,
    confLabel,
    message.el,
    h("div", { class: "actions" }, submit,
      h("button", { type: "button", class: "secondary", onclick: () => (form.hidden = true) }, "Close")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let parsed;
    try {
      if (params) {
        parsed = params.value();
      } else {
        parsed = JSON.parse(conf.value || "{}");
        if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("conf must be a JSON object");
      }
    } catch (err) {
      message.set(err.message.startsWith("conf") ? err.message : `conf: ${err.message}`);
      return;
    }
    const body = { conf: parsed };
    if (runId.value.trim()) body.run_id = runId.value.trim();
    submit.disabled = true;
    try {
      const run = await api(`/dags/${enc(dagId)}/runs`, { method: "POST", body });
      message.set("");
      errors.set("");
      location.hash = href("dags", dagId, "runs", run.run_id);
    } catch (err) {
      message.set(err.message);
    } finally {
      submit.disabled = false;
    }
  });
  const button = h("button", { type: "button", class: "primary", "data-testid": "trigger-button",
    onclick: () => { form.hidden = !form.hidden; if (!form.hidden && !params) conf.focus(); } }, "Trigger run");
  /** Rebuild the fields when the DAG's params schema changes (a new version was applied). */
  const setSchema = (schema) => {
    const key = JSON.stringify(schema || null);
    if (key === paramsKey) return;
    paramsKey = key;
    params = schema ? paramsForm(schema) : null;
    fill(paramsSlot, params ? params.el : null);
    confLabel.hidden = Boolean(params);
  };
  return { button, form, setSchema };
}

/** What the grid's colours mean: every task state, and "no instance" (a task added since). */
function stateLegend() {
  const entry = (state, text) => h("li", { "data-state": state }, h("span", { class: `cell st-${state}`, "aria-hidden": "true" }), text);
  return h("ul", { class: "state-legend", "aria-label": "Colours", "data-testid": "state-legend" },
    TASK_STATES.map((state) => entry(state, state.replace(/_/g, " "))), entry("none", "no instance"));
}

function runsGrid(dagId, order, runs, details) {
  const shown = runs.slice(0, GRID_RUNS).reverse(); // oldest left, newest right
  if (!shown.length) return h("p", { class: "empty muted" }, "No runs yet.");
  const cell = (run, id) => {
    const ti = details.get(run.run_id)?.get(id);
    const state = ti ? ti.state : "none";
    return h("td", {}, h("a", {
      class: `cell st-${state}`, href: href("dags", dagId, "runs", run.run_id, "tasks", id),
      title: `${id} · ${run.run_id} · ${state}${ti && ti.try_number > 1 ? ` · try ${ti.try_number}` : ""}`,
      "data-state": state, "aria-label": `${id} in ${run.run_id}: ${state}`,
    }));
  };
  return h("div", { class: "table-wrap grid-wrap" },
    h("table", { class: "runs-grid", "data-testid": "runs-grid" },
      h("thead", {}, h("tr", {}, h("th", { class: "task-col" }, "task \\ run"),
        shown.map((run) => h("th", {}, h("a", {
          class: `cell run-cell st-${run.state}`, href: href("dags", dagId, "runs", run.run_id),
          title: `${run.run_id} · ${run.state} · ${fmtTime(run.logical_date || run.created_at)}`,
          "aria-label": `run ${run.run_id}: ${run.state}`,
        }))))),
      h("tbody", {}, order.map((id) => h("tr", {}, h("th", { class: "task-col mono", title: id }, id),
        shown.map((run) => cell(run, id)))))));
}

export default {
  title: ({ dagId }) => dagId,
  mount(root, { dagId }, ctx) {
    const errors = notice();
    const facts = h("div", { class: "facts-row", "data-testid": "dag-facts" });
    const waiting = h("div", { class: "facts-row" }); // a DAG on datasets: what it waits for
    const controls = h("div", { class: "page-actions" });
    const trigger = ctx.canWrite ? triggerForm(dagId, ctx, errors) : null;
    const backfill = ctx.canWrite ? backfillForm(dagId, ctx, () => errors.set("Backfill started.", "info")) : null;
    const graph = section("Task graph", { testid: "graph" });
    const grid = section("Recent runs", { testid: "grid" });
    const runsSection = section("Runs", { testid: "runs" });
    const backfills = section("Backfills", { testid: "backfills" });
    backfills.el.hidden = true;
    const runsTable = runsSection.body;
    fill(root,
      crumbs(["DAGs", "#/dags"], dagId),
      h("div", { class: "page-head" }, h("h1", { class: "mono" }, dagId), controls),
      errors.el, trigger ? trigger.form : null, backfill ? backfill.form : null, facts, waiting, graph.el, grid.el,
      backfills.el, runsSection.el);
    const details = new Map(); // run_id -> Map(task_id -> instance); terminal runs are cached
    let graphKey = "";
    const headChanged = changeGate();
    const runsChanged = changeGate();

    return {
      async refresh() {
        const [dag, runsResp] = await Promise.all([
          api(`/dags/${enc(dagId)}`),
          api(`/dags/${enc(dagId)}/runs`, { query: { limit: RECENT_RUNS } }),
        ]);
        const runs = items(runsResp, "runs");
        const shown = new Set(runs.slice(0, GRID_RUNS).map((r) => r.run_id));
        for (const id of details.keys()) if (!shown.has(id)) details.delete(id); // bounded in a long-open tab
        await Promise.all(runs.slice(0, GRID_RUNS).map(async (run) => {
          const cached = details.get(run.run_id);
          if (cached && cached.terminal) return;
          const full = await api(`/dags/${enc(dagId)}/runs/${enc(run.run_id)}`);
          const map = instancesOf(full);
          map.terminal = TERMINAL_RUN_STATES.has(full.state);
          details.set(run.run_id, map);
        }));
        if (!ctx.isCurrent()) return;

        const backfillList = await backfillsTable(dagId, ctx, errors.set);
        if (!ctx.isCurrent()) return;
        backfills.el.hidden = !backfillList;
        fill(backfills.body, backfillList);
        if (headChanged(dag)) {
          if (trigger) trigger.setSchema(dag.spec?.params);
          fill(controls, pausedControl(dag, ctx, errors.set), trigger ? trigger.button : null,
            backfill && typeof dag.schedule === "string" ? backfill.button : null);
          fill(facts,
            fact("Schedule", scheduleText(dag.schedule) ? h("code", {}, scheduleText(dag.schedule)) : "manual only"),
            fact("Next run", dag.paused ? "paused" : timeEl(dag.next_run_at)),
            dag.schedule_error ? fact("Schedule stopped", h("span", { class: "reason", "data-testid": "schedule-error" }, dag.schedule_error)) : null,
            fact("Version", dag.version ?? dag.current_version ?? "—"),
            fact("Tasks", String(tasksOf(dag).length)),
            dag.spec?.description ? fact("About", dag.spec.description) : null);
        }

        const condition = dag.schedule && typeof dag.schedule === "object" ? dag.schedule.datasets : null;
        const uses = condition ? items(await api("/datasets", { query: { dag_id: dagId, limit: 100 } })) : [];
        if (!ctx.isCurrent()) return;
        fill(waiting, condition ? fact("Datasets", datasetWait(dag, uses, runs)) : null);

        const tasks = tasksOf(dag);
        const latest = runs[0];
        const latestStates = new Map();
        if (latest && details.has(latest.run_id)) for (const [id, ti] of details.get(latest.run_id)) latestStates.set(id, ti.state);
        const vertical = preferVertical(tasks, graph.body.clientWidth);
        const key = JSON.stringify([tasks.map((t) => [taskId(t), dependsOn(t)]), [...latestStates], latest?.run_id, vertical]);
        if (key !== graphKey) {
          graphKey = key;
          fill(graph.body, taskGraph(tasks, {
            vertical,
            states: latestStates,
            linkFor: (id) => (latest ? href("dags", dagId, "runs", latest.run_id, "tasks", id) : null),
          }), latest ? h("p", { class: "muted small" }, `Colours: latest run ${latest.run_id}.`) : null);
        }
        if (!runsChanged([runs, [...details].map(([id, m]) => [id, [...m.values()].map((ti) => ti.state)])])) return;
        fill(grid.body, runsGrid(dagId, topoOrder(tasks), runs, details), runs.length ? stateLegend() : null);
        // Newest runs are on the right: where a narrow screen scrolls the grid to (task names stay, sticky).
        const gridWrap = grid.body.querySelector(".grid-wrap");
        if (gridWrap) gridWrap.scrollLeft = gridWrap.scrollWidth;
        fill(runsTable, table([
          { title: "Run", cell: (r) => h("a", { href: href("dags", dagId, "runs", r.run_id), class: "mono", "data-testid": `run-link-${r.run_id}` }, r.run_id) },
          { title: "State", cell: (r) => badge(r.state) },
          { title: "Type", class: "opt", cell: (r) => r.run_type || "—" },
          { title: "Logical date", class: "opt", cell: (r) => fmtTime(r.logical_date) },
          { title: "Started", cell: (r) => timeEl(r.started_at || r.created_at) },
          { title: "Duration", cell: (r) => (r.started_at ? fmtDuration(secondsBetween(r.started_at, r.ended_at)) : "—") },
        ], runs, { empty: "No runs yet.", testid: "runs-table" }));
      },
    };
  },
};
