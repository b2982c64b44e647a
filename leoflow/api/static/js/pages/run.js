// One run: its task instances (state, tries, durations), a Gantt-style bar per task, and for
// admins the cancel button (active runs), "clear failed tasks" (runs with unsuccessful tasks)
// and per task: clear it (and its downstream), mark it success or failed. Clears and marks are
// applied by the leader; the answer says what it did (or that it is recorded for the next one).

import { api, enc, items } from "../api.js";
import { fill, h, href } from "../dom.js";
import { badge, fmtDuration, fmtTime, parseTime, secondsBetween, TERMINAL_RUN_STATES, timeEl } from "../format.js";
import { topoOrder } from "../graph.js";
import { confirmButton, confirmOpen, crumbs, fact, notice, section, table } from "../ui.js";
import { instancesOf, tasksOf } from "./dag.js";

function ganttChart(dagId, runId, order, instances, run) {
  const rows = order.map((id) => instances.get(id)).filter(Boolean);
  const starts = rows.map((ti) => parseTime(ti.queued_at || ti.started_at)).filter(Boolean).map((t) => t.getTime());
  const runStart = parseTime(run.started_at)?.getTime();
  if (runStart) starts.push(runStart);
  if (!starts.length) return h("p", { class: "empty muted" }, "No task has started yet.");
  const t0 = Math.min(...starts);
  const ends = rows.map((ti) => parseTime(ti.ended_at)?.getTime() ?? (ti.started_at || ti.queued_at ? Date.now() : null)).filter(Boolean);
  const t1 = Math.max(t0 + 1000, ...ends, parseTime(run.ended_at)?.getTime() ?? 0);
  const span = t1 - t0;
  const pct = (t) => `${(((t - t0) / span) * 100).toFixed(3)}%`;
  const widthPct = (a, b) => `${Math.max(((b - a) / span) * 100, 0.4).toFixed(3)}%`;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) =>
    h("span", { class: "tick", style: { left: `${f * 100}%` } }, fmtDuration((span * f) / 1000)));
  return h("div", { class: "gantt", "data-testid": "gantt" },
    h("div", { class: "gantt-row gantt-axis" }, h("span", { class: "gantt-label" }, ""), h("div", { class: "gantt-track" }, ticks)),
    rows.map((ti) => {
      const queued = parseTime(ti.queued_at)?.getTime();
      const started = parseTime(ti.started_at)?.getTime();
      const ended = parseTime(ti.ended_at)?.getTime() ?? Date.now();
      const bars = [];
      if (queued && (started || ended) && (started ?? ended) > queued) {
        bars.push(h("span", { class: "bar bar-wait", style: { left: pct(queued), width: widthPct(queued, started ?? ended) },
          title: `queued ${fmtDuration(((started ?? ended) - queued) / 1000)}` }));
      }
      if (started) {
        bars.push(h("span", { class: `bar st-${ti.state}`, style: { left: pct(started), width: widthPct(started, ended) },
          title: `${ti.task_id}: ${ti.state}, ${fmtDuration((ended - started) / 1000)}` }));
      }
      return h("div", { class: "gantt-row", "data-task": ti.task_id },
        h("a", { class: "gantt-label mono", href: href("dags", dagId, "runs", runId, "tasks", ti.task_id), title: ti.task_id }, ti.task_id),
        h("div", { class: "gantt-track" }, bars));
    }));
}

/** The webhook deliveries of this run: event, where to, state, attempts; admins may retry. */
function notificationsTable(sent, ctx, onError) {
  const retry = (n) => async () => {
    try {
      await api(`/notifications/${n.id}/retry`, { method: "POST" });
    } catch (err) {
      onError(`Could not retry: ${err.message}`);
    }
    await ctx.refresh();
  };
  return table([
    { title: "Event", cell: (n) => n.event + (n.task_id ? ` · ${n.task_id}` : "") },
    { title: "To", class: "opt", cell: (n) => (n.target === "default" ? "default webhook" : (n.url || "—")) },
    { title: "State", cell: (n) => badge(n.state === "delivered" ? "success" : n.state === "failed" ? "failed" : "queued") },
    { title: "Attempts", cell: (n) => String(n.attempts) },
    { title: "Last error", class: "opt", cell: (n) => n.last_error || "" },
    { title: "", cell: (n) => (ctx.canWrite && n.state !== "delivered"
      ? confirmButton("Retry", "Send now", retry(n), { testid: `retry-notification-${n.id}`, danger: false }) : "") },
  ], sent, { testid: "notifications-table", rowAttrs: (n) => ({ "data-event": n.event, "data-state": n.state }) });
}

export default {
  title: ({ runId }) => runId,
  mount(root, { dagId, runId }, ctx) {
    const errors = notice();
    const head = h("div", { class: "page-actions" });
    const facts = h("div", { class: "facts-row", "data-testid": "run-facts" });
    const tasks = section("Task instances", { testid: "task-instances" });
    const gantt = section("Timeline", { testid: "timeline-section" });
    const notes = section("Notifications", { testid: "notifications" });
    notes.el.hidden = true;
    fill(root,
      crumbs(["DAGs", "#/dags"], [dagId, href("dags", dagId)], runId),
      h("div", { class: "page-head" }, h("h1", { class: "mono wrap" }, runId), head),
      errors.el, facts, tasks.el, gantt.el, notes.el);
    let order = null;

    const cancel = async () => {
      try {
        await api(`/dags/${enc(dagId)}/runs/${enc(runId)}/cancel`, { method: "POST" });
        errors.set("Cancellation requested.", "info");
      } catch (err) {
        errors.set(`Could not cancel: ${err.message}`);
      }
      await ctx.refresh();
    };
    /** Approve or reject a task waiting for an approval (wait_for: approval); the leader applies it. */
    const decide = (taskId, decision) => async () => {
      const input = tasks.body.querySelector(`input[data-testid="approval-comment-${CSS.escape(taskId)}"]`);
      const comment = input ? input.value : "";
      try {
        await api(`/dags/${enc(dagId)}/runs/${enc(runId)}/tasks/${enc(taskId)}/approval`,
          { method: "POST", body: { decision, comment } });
        errors.set(`${taskId}: ${decision === "approve" ? "approved" : "rejected"}; the leader applies it.`, "info");
      } catch (err) {
        errors.set(`Could not ${decision} ${taskId}: ${err.message}`);
      }
      if (input) input.value = ""; // sent: the poll may redraw the row again
      await ctx.refresh();
    };
    /** POST a clear or mark and say what the leader did. */
    const command = (path, body, label) => async () => {
      try {
        const answer = await api(`/dags/${enc(dagId)}/runs/${enc(runId)}${path}`, { method: "POST", body });
        const c = answer.command || {};
        if (c.state === "pending") errors.set(`${label}: recorded; the leader will apply it.`, "info");
        else if (!(c.tasks || []).length) errors.set(`${label}: nothing to change.`, "info");
        else errors.set(`${label}: ${c.tasks.join(", ")}.`, "info");
      } catch (err) {
        errors.set(`Could not ${label.toLowerCase()}: ${err.message}`);
      }
      await ctx.refresh();
    };
    const UNSUCCESSFUL = new Set(["failed", "upstream_failed", "cancelled"]);
    let lastState = null;

    return {
      async refresh() {
        const run = await api(`/dags/${enc(dagId)}/runs/${enc(runId)}`);
        if (order === null) {
          try {
            order = topoOrder(tasksOf(await api(`/dags/${enc(dagId)}`)));
          } catch {
            order = [];
          }
        }
        if (!ctx.isCurrent()) return;
        const instances = instancesOf(run);
        const ids = [...order.filter((id) => instances.has(id)), ...[...instances.keys()].filter((id) => !order.includes(id))];

        const unsuccessful = [...instances.values()].some((ti) => UNSUCCESSFUL.has(ti.state));
        const headKey = `${run.state}/${unsuccessful}`;
        if (headKey !== lastState) {
          lastState = headKey;
          fill(head, ctx.canWrite && !TERMINAL_RUN_STATES.has(run.state)
            ? confirmButton("Cancel run", "Yes, cancel it", cancel, { testid: "cancel-run" }) : null,
          ctx.canWrite && unsuccessful && run.state !== "queued"
            ? confirmButton("Clear failed tasks", "Yes, run them again",
              command("/clear", { failed_only: true, downstream: true }, "Cleared"), { testid: "clear-failed", danger: false })
            : null,
          ctx.canWrite && run.state !== "queued" && run.state !== "success"
            ? confirmButton("Mark run success", "Yes, success", command("/mark", { state: "success" }, "Run marked success"),
              { testid: "mark-run-success", danger: false }) : null,
          ctx.canWrite && run.state !== "queued" && run.state !== "failed"
            ? confirmButton("Mark run failed", "Yes, failed", command("/mark", { state: "failed" }, "Run marked failed"),
              { testid: "mark-run-failed" }) : null);
        }
        fill(facts,
          h("div", { class: "fact" }, h("span", { class: "fact-label" }, "State"), h("span", { "data-testid": "run-state" }, badge(run.state))),
          run.reason ? fact("Reason", h("span", { class: "reason", "data-testid": "run-reason" }, `run ${run.state}: ${run.reason}`)) : null,
          fact("Type", run.run_type || "—"),
          fact("Logical date", fmtTime(run.logical_date)),
          fact("Started", timeEl(run.started_at)),
          fact("Duration", run.started_at ? fmtDuration(secondsBetween(run.started_at, run.ended_at)) : "—"),
          run.conf && Object.keys(run.conf).length ? fact("Conf", h("code", { class: "conf" }, JSON.stringify(run.conf))) : null);

        const rows = ids.map((id) => instances.get(id));
        // Neither a confirmation nor an approval comment being written is redrawn away by the poll.
        const commenting = [...tasks.body.querySelectorAll("input.approval-comment")].some((i) => i.value || i === document.activeElement);
        if (!confirmOpen(tasks.body) && !commenting) fill(tasks.body, table([
          { title: "Task", cell: (ti) => h("a", { href: href("dags", dagId, "runs", runId, "tasks", ti.task_id), class: "mono", "data-testid": `task-link-${ti.task_id}` }, ti.task_id) },
          { title: "State", cell: (ti) => (ti.map_states ? h("span", { "data-testid": `map-${ti.task_id}` }, badge(ti.state),
            h("span", { class: "muted small" }, ` ×${ti.map_count}: ` + Object.keys(ti.map_states).sort()
              .map((s) => `${ti.map_states[s]} ${s}`).join(", "))) : badge(ti.state)) },
          { title: "Tries", cell: (ti) => (ti.map_states ? "—" : `${ti.try_number ?? 0}/${ti.max_tries ?? "?"}`) },
          { title: "Started", class: "opt", cell: (ti) => timeEl(ti.started_at) },
          { title: "Duration", cell: (ti) => (ti.started_at ? fmtDuration(secondsBetween(ti.started_at, ti.ended_at)) : "—") },
          { title: "Reason", class: "opt", cell: (ti) => ti.reason ? h("span", { class: "reason" }, ti.reason)
            : ti.state === "waiting" ? h("a", { href: href("dags", dagId, "runs", runId, "tasks", ti.task_id), class: "muted small",
              "data-testid": `waiting-${ti.task_id}` }, "waiting for its conditions (wait_for)") : "" },
          ...(ctx.canWrite && run.state !== "queued" ? [{ title: "", cell: (ti) => h("span", { class: "row-actions" },
            ti.state === "waiting" ? h("input", { type: "text", class: "approval-comment", maxlength: "2000",
              placeholder: "comment", "aria-label": `comment on ${ti.task_id}`, "data-testid": `approval-comment-${ti.task_id}` }) : null,
            ti.state === "waiting" ? confirmButton("Approve", "Yes, approve", decide(ti.task_id, "approve"),
              { testid: `approve-${ti.task_id}`, danger: false }) : null,
            ti.state === "waiting" ? confirmButton("Reject", "Yes, reject", decide(ti.task_id, "reject"),
              { testid: `reject-${ti.task_id}` }) : null,
            confirmButton("Clear", "Clear it and downstream", command("/clear", { tasks: [ti.task_id], downstream: true }, "Cleared"),
              { testid: `clear-task-${ti.task_id}`, danger: false }),
            ti.state !== "success" ? confirmButton("Mark success", "Yes, success",
              command(`/tasks/${enc(ti.task_id)}/mark`, { state: "success" }, "Marked success"), { testid: `mark-success-${ti.task_id}`, danger: false }) : null,
            ti.state !== "failed" && run.state !== "cancelled" ? confirmButton("Mark failed", "Yes, failed",
              command(`/tasks/${enc(ti.task_id)}/mark`, { state: "failed" }, "Marked failed"), { testid: `mark-failed-${ti.task_id}` }) : null) }] : []),
        ], rows, { empty: "This run has no task instances yet.", testid: "ti-table", rowAttrs: (ti) => ({ "data-task": ti.task_id, "data-state": ti.state }) }));
        fill(gantt.body, ganttChart(dagId, runId, ids, instances, run));
        const sent = items(await api("/notifications", { query: { dag_id: dagId, run_id: runId, limit: 50 } }));
        if (!ctx.isCurrent()) return;
        notes.el.hidden = !sent.length;
        if (!confirmOpen(notes.body)) fill(notes.body, notificationsTable(sent, ctx, errors.set));
      },
      pollMs: () => (TERMINAL_RUN_STATES.has((lastState || "").split("/")[0]) ? 5000 : 1500),
    };
  },
};
