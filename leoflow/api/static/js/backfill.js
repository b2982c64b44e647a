// A DAG's backfills: the form to start one (admins, scheduled DAGs) and each backfill's
// progress with a cancel button while it runs.

import { api, enc, items } from "./api.js";
import { h } from "./dom.js";
import { badge, fmtTime } from "./format.js";
import { confirmButton, notice, table } from "./ui.js";

const LIST = 10;

function progress(b) {
  const runs = b.runs || {};
  const done = (runs.success || 0) + (runs.failed || 0) + (runs.cancelled || 0) + (b.slots_skipped || 0);
  const pct = b.slots_total ? Math.round((done / b.slots_total) * 100) : 0;
  const parts = ["success", "failed", "cancelled", "running", "queued"].filter((s) => runs[s]).map((s) => `${runs[s]} ${s}`);
  if (b.slots_skipped) parts.push(`${b.slots_skipped} skipped`);
  return h("div", { class: "progress-cell" },
    h("div", { class: "progress", title: `${done}/${b.slots_total}` }, h("span", { style: { width: `${pct}%` } })),
    h("span", { class: "small muted" }, `${done}/${b.slots_total} · ${parts.join(", ") || "no runs yet"}`));
}

/** The form: [start, end), max active runs, re-run failed. */
export function backfillForm(dagId, ctx, onDone) {
  const message = notice();
  const start = h("input", { type: "date", name: "start", required: true, "data-testid": "backfill-start" });
  const end = h("input", { type: "date", name: "end", required: true, "data-testid": "backfill-end" });
  const maxRuns = h("input", { type: "number", name: "max_active_runs", min: 1, max: 1000, value: "10",
    "data-testid": "backfill-max" });
  const rerun = h("input", { type: "checkbox", name: "rerun_failed", "data-testid": "backfill-rerun" });
  const submit = h("button", { type: "submit", class: "primary", "data-testid": "backfill-submit" }, "Start backfill");
  const form = h("form", { class: "trigger-form", hidden: true, "data-testid": "backfill-form" },
    h("p", { class: "small muted" }, "Runs the DAG for each cron slot in [start, end), in the DAG's time zone."),
    h("div", { class: "form-row" }, h("label", {}, "Start", start), h("label", {}, "End (exclusive)", end),
      h("label", {}, "Runs at once", maxRuns)),
    h("label", { class: "inline" }, rerun, " Re-run slots whose run failed"),
    message.el,
    h("div", { class: "actions" }, submit,
      h("button", { type: "button", class: "secondary", onclick: () => (form.hidden = true) }, "Close")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    try {
      await api(`/dags/${enc(dagId)}/backfill`, { method: "POST", body: {
        start: start.value, end: end.value, max_active_runs: Number(maxRuns.value || 10), rerun_failed: rerun.checked } });
      message.set("");
      form.hidden = true;
      onDone();
      await ctx.refresh();
    } catch (err) {
      message.set(err.message);
    } finally {
      submit.disabled = false;
    }
  });
  const button = h("button", { type: "button", class: "secondary", "data-testid": "backfill-button",
    onclick: () => { form.hidden = !form.hidden; } }, "Backfill");
  return { button, form };
}

/** Fetch and render the DAG's latest backfills (null when there are none). */
export async function backfillsTable(dagId, ctx, onError) {
  const list = items(await api(`/dags/${enc(dagId)}/backfills`, { query: { limit: LIST } }));
  if (!list.length) return null;
  const cancel = (b) => async () => {
    try {
      await api(`/dags/${enc(dagId)}/backfills/${b.id}/cancel`, { method: "POST" });
    } catch (err) {
      onError(`Could not cancel backfill ${b.id}: ${err.message}`);
    }
    await ctx.refresh();
  };
  return table([
    { title: "#", cell: (b) => String(b.id) },
    { title: "State", cell: (b) => badge(b.state) },
    { title: "Range", class: "opt", cell: (b) => `${fmtTime(b.start)} → ${fmtTime(b.end)}` },
    { title: "Progress", cell: progress },
    { title: "By", class: "opt", cell: (b) => b.created_by },
    { title: "", cell: (b) => (ctx.canWrite && b.state === "running"
      ? confirmButton("Cancel", "Yes, cancel", cancel(b), { testid: `cancel-backfill-${b.id}` }) : "") },
  ], list, { testid: "backfills-table", rowAttrs: (b) => ({ "data-backfill": b.id, "data-state": b.state }) });
}
