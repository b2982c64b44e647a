// Task logs: one tab per try; while the selected try is running the log is re-fetched every
// second and the view follows the tail unless the reader scrolled up. On Kubernetes a running
// try's log comes live from its pod (X-Leoflow-Log-Source: pod, a bounded tail), read by
// whichever replica serves the page; a finished try's from the stored copy. Above the log, the
// outputs the task published (its current ones: those of the try that succeeded), name → value.
// With a log archive (LEOFLOW_LOG_ARCHIVE_URL), a second row of tabs names every archived
// container of the try (task, sidecars, init containers): one shows the end of that container's
// full log from the archive, and "Download" saves all of it. Below the log, the Kubernetes events
// of the try's pod (FailedMount, BackOff, …), kept with the try after the pod is gone: fetched when
// another try is shown, and every few polls while it runs. Then the try's output artifacts, each
// with what is stored (or why nothing is) and a download of its .tar.gz, fetched through the API.
// A search box finds text in the log shown (the archive's last 512 KiB; Download for the rest).

import { api, enc } from "../api.js";
import { fill, h, href } from "../dom.js";
import { badge, fmtDuration, secondsBetween, TERMINAL_TASK_STATES, timeEl } from "../format.js";
import { crumbs, fact, notice, section, table } from "../ui.js";

const LIVE_POLL_MS = 1000;
const IDLE_POLL_MS = 5000;
// An output is at most 4,095 bytes, a whole screen of text: past this many characters a value
// shows its start and a button for the rest, so one long value does not push the log away.
const OUTPUT_SHOWN_CHARS = 160;
// An archived log is shown from its last 512 KiB (the whole of it is one "Download" away).
const ARCHIVE_VIEW_BYTES = 512 * 1024;
// While a try runs its pod's events are fetched again every this many polls (a new event is rare).
const EVENT_POLLS = 5;
// Search marks at most this many matches (and counts up to SEARCH_COUNT_MAX): a one-letter search
// in 512 KiB of log must not build a million nodes.
const SEARCH_MARKS = 2000;
const SEARCH_COUNT_MAX = 100000;

/**
 * Where ``query`` occurs in ``text``, case-insensitively, as plain text: what a reader types is
 * escaped into a literal pattern, never run as one (a pattern from the page could hang the tab on
 * a large log). Offsets are into ``text`` itself, so marks land on the right characters.
 */
function findAll(text, query) {
  const literal = new RegExp(query.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gi");
  const at = [];
  for (let m = literal.exec(text); m !== null && at.length < SEARCH_COUNT_MAX; m = literal.exec(text)) {
    at.push([m.index, m[0].length]);
  }
  return at;
}

/** ``text`` with the first SEARCH_MARKS of ``hits`` in <mark> nodes (text nodes only, never HTML). */
function markedLog(text, hits, current) {
  const parts = [];
  let at = 0;
  hits.slice(0, SEARCH_MARKS).forEach(([index, length], n) => {
    parts.push(text.slice(at, index),
      h("mark", { class: n === current ? "hit current" : "hit", "data-hit": String(n) }, text.slice(index, index + length)));
    at = index + length;
  });
  parts.push(text.slice(at));
  return parts;
}

/** Bytes for people: 1.2 MB, 340 B. */
function fmtBytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit]}`;
}

const EVENT_COLUMNS = [
  { title: "Last seen", cell: (e) => timeEl(e.last_seen) },
  { title: "Type", cell: (e) => e.type },
  { title: "Reason", cell: (e) => h("span", { class: "mono" }, e.reason) },
  { title: "Container", cell: (e) => e.container || "—" },
  { title: "Count", cell: (e) => String(e.count) },
  { title: "Message", cell: (e) => e.message },
];

/**
 * The outputs as a list of name → value, by name. Values are text (textContent, via h()), never
 * HTML: a task's outputs are whatever its process wrote. Strings as they are, the rest as JSON.
 */
function outputsList(outputs, expanded, redraw) {
  return h("dl", { class: "outputs" }, Object.keys(outputs).sort().map((name) => {
    const value = outputs[name];
    const text = typeof value === "string" ? value : JSON.stringify(value);
    const long = text.length > OUTPUT_SHOWN_CHARS;
    const open = expanded.has(name);
    const toggle = () => {
      if (open) expanded.delete(name);
      else expanded.add(name);
      redraw();
    };
    return [
      h("dt", { class: "mono" }, name),
      h("dd", { "data-testid": `output-${name}`, "data-expanded": long ? String(open) : undefined },
        h("code", { class: "output-value" }, long && !open ? `${text.slice(0, OUTPUT_SHOWN_CHARS)}…` : text),
        long ? h("button", { type: "button", class: "output-more", "data-testid": `output-more-${name}`,
          "aria-expanded": String(open), onclick: toggle }, open ? "Show less" : `Show all (${text.length} characters)`)
          : null),
    ];
  }));
}

// A mapped task (map_over) is many task instances: the page shows one, chosen by ?map_index=, and
// a mapped task without one lists its instances (state counts, then a link to each).
const INSTANCE_LINKS = 500;

function instancesOf(ti, dagId, runId, taskId) {
  const counts = Object.keys(ti.map_states || {}).sort().map((s) => `${ti.map_states[s]} ${s}`).join(", ");
  const links = [];
  for (let i = 0; i < Math.min(ti.map_count, INSTANCE_LINKS); i += 1) {
    links.push(h("a", { href: `${href("dags", dagId, "runs", runId, "tasks", taskId)}?map_index=${i}`,
      class: "mono instance-link", "data-testid": `instance-${i}` }, `[${i}]`), " ");
  }
  return h("div", { "data-testid": "map-instances" },
    h("p", {}, `Mapped over ${ti.map_count} items: ${counts}.`),
    h("p", {}, links, ti.map_count > INSTANCE_LINKS ? `… (${ti.map_count - INSTANCE_LINKS} more: use ?map_index=N)` : ""));
}

function triesOf(ti) {
  const list = ti.tries || ti.task_tries || [];
  return [...list].sort((a, b) => a.try_number - b.try_number);
}

export default {
  title: ({ taskId }) => `${taskId} logs`,
  mount(root, { dagId, runId, taskId }, ctx) {
    const errors = notice();
    const tabs = h("div", { class: "tabs", role: "tablist", "data-testid": "try-tabs" });
    const meta = h("div", { class: "facts-row", "data-testid": "try-facts" });
    const outputs = section("Outputs", { testid: "task-outputs" });
    outputs.el.hidden = true;
    const instances = section("Instances", { testid: "task-instances" });
    instances.el.hidden = true;
    const expanded = new Set(); // the long values opened, kept across polls
    let shownOutputs = null;
    const drawOutputs = () => {
      const values = shownOutputs === null ? null : JSON.parse(shownOutputs);
      outputs.el.hidden = values === null;
      fill(outputs.body, values === null ? null : outputsList(values, expanded, drawOutputs));
    };
    const containerTabs = h("div", { class: "tabs", role: "tablist", "data-testid": "container-tabs" });
    containerTabs.hidden = true;
    const download = h("button", { type: "button", class: "secondary", "data-testid": "log-download" }, "Download");
    download.hidden = true;
    const follow = h("input", { type: "checkbox", checked: true, "data-testid": "follow" });
    const status = h("span", { class: "muted small", "data-testid": "log-status" });
    const pre = h("pre", { class: "log", "data-testid": "log", tabindex: 0 });
    const search = h("input", { type: "search", placeholder: "Search this log", maxlength: 200,
      "aria-label": "Search this log", "data-testid": "log-search" });
    const searchCount = h("span", { class: "muted small", "data-testid": "log-search-count", "aria-live": "polite" });
    const searchPrev = h("button", { type: "button", class: "secondary", "data-testid": "log-search-prev" }, "Previous");
    const searchNext = h("button", { type: "button", class: "secondary", "data-testid": "log-search-next" }, "Next");
    const searchRow = h("div", { class: "log-search" }, search, searchPrev, searchNext, searchCount);
    let hit = 0; // the current match, kept across polls while the search is the same
    const drawLog = (reveal) => {
      const text = lastText ?? "";
      const query = search.value;
      if (!query) {
        pre.textContent = text;
        searchCount.textContent = "";
        return;
      }
      const hits = findAll(text, query);
      const marked = Math.min(hits.length, SEARCH_MARKS);
      hit = marked === 0 ? 0 : ((hit % marked) + marked) % marked;
      fill(pre, markedLog(text, hits, hit));
      searchCount.textContent = hits.length === 0 ? "no match"
        : `${hit + 1} of ${hits.length >= SEARCH_COUNT_MAX ? `${SEARCH_COUNT_MAX.toLocaleString()}+`
          : hits.length.toLocaleString()}${hits.length > SEARCH_MARKS ? ` (the first ${SEARCH_MARKS.toLocaleString()} marked)` : ""}`;
      searchCount.dataset.matches = String(hits.length);
      const current = pre.querySelector("mark.current");
      if (reveal && current) current.scrollIntoView({ block: "center" });
    };
    const step = (by) => {
      hit += by;
      follow.checked = false; // reading a match: the view must not jump to the tail on the next poll
      drawLog(true);
    };
    search.addEventListener("input", () => {
      hit = 0;
      if (search.value) follow.checked = false;
      drawLog(true);
    });
    search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        step(e.shiftKey ? -1 : 1);
      }
    });
    searchPrev.addEventListener("click", () => step(-1));
    searchNext.addEventListener("click", () => step(1));
    const events = section("Pod events", { testid: "pod-events" });
    events.el.hidden = true;
    const artifacts = section("Artifacts", { testid: "artifacts" });
    artifacts.el.hidden = true;
    let artifactsFor = null; // "try:live" whose artifacts are shown: fetched again when it changes
    const saveArtifact = async (which, name) => {
      try {
        const query = { try: which, ...instanceQuery };
        const data = await api(`${base}/artifacts/${enc(name)}`, { query, blob: true });
        const link = h("a", { href: URL.createObjectURL(data), download: `${taskId}-${name}-try${which}.tar.gz` });
        link.click();
        URL.revokeObjectURL(link.href);
      } catch (err) {
        errors.set(`download failed: ${err.message}`);
      }
    };
    const artifactColumns = (which) => [
      { title: "Name", cell: (a) => h("span", { class: "mono" }, a.name) },
      { title: "Kind", cell: (a) => a.kind || "—" },
      { title: "Size",
        cell: (a) => (a.complete ? `${fmtBytes(a.size_bytes)} (${fmtBytes(a.stored_bytes)} stored)` : "—") },
      { title: "Stored", cell: (a) => (a.complete ? "yes" : a.problem || "no") },
      { title: "", cell: (a) => (a.complete ? h("button", { type: "button", class: "secondary",
        "data-testid": `artifact-download-${a.name}`, onclick: () => saveArtifact(which, a.name) }, "Download") : "") },
    ];
    let eventsFor = null; // the try whose events are shown, and polls since they were fetched
    let eventPolls = 0;
    fill(root,
      crumbs(["DAGs", "#/dags"], [dagId, href("dags", dagId)], [runId, href("dags", dagId, "runs", runId)], taskId),
      h("div", { class: "page-head" }, h("h1", { class: "mono" }, taskId),
        h("div", { class: "page-actions" }, download, h("label", { class: "inline" }, follow, " follow"))),
      errors.el, tabs, containerTabs, meta, instances.el, outputs.el, status, searchRow, pre, events.el, artifacts.el);

    const mapIndex = /^[0-9]{1,4}$/.test(ctx.query.get("map_index") || "") ? ctx.query.get("map_index") : null;
    const instanceQuery = mapIndex === null ? {} : { map_index: mapIndex };
    const wanted = Number.parseInt(ctx.query.get("try") || "", 10);
    let selected = Number.isFinite(wanted) ? wanted : null;
    let live = true;
    // The task instance and the log are two requests: a try that ends between them shows a
    // complete log beside a still-running state. Keep the live pace until the state shown is
    // final too, or the page would show that mismatch for a whole idle poll.
    let settled = false;
    let lastText = null;
    // The archived containers of the selected try, when they were last looked up, and the one shown
    // (null: the log as before: live or stored).
    let containers = [];
    let containersFor = null;
    let container = null;

    pre.addEventListener("scroll", () => {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (!atBottom && follow.checked && live) follow.checked = false;
    });
    follow.addEventListener("change", () => { if (follow.checked) pre.scrollTop = pre.scrollHeight; });

    const select = (n) => {
      selected = n;
      lastText = null;
      container = null;
      containersFor = null;
      const index = mapIndex === null ? "" : `&map_index=${mapIndex}`;
      history.replaceState(null, "", href("dags", dagId, "runs", runId, "tasks", taskId) + `?try=${n}${index}`);
      ctx.refresh();
    };

    const base = `/dags/${enc(dagId)}/runs/${enc(runId)}/tasks/${enc(taskId)}`;
    const showContainer = (name) => {
      container = name;
      lastText = null;
      ctx.refresh();
    };
    download.addEventListener("click", async () => {
      if (container === null || selected === null) return;
      try {
        const whole = await api(`${base}/logs`, { query: { try: selected, container, ...instanceQuery }, text: true });
        const link = h("a", { href: URL.createObjectURL(new Blob([whole], { type: "text/plain" })),
          download: `${taskId}-try${selected}-${container}.log` });
        link.click();
        URL.revokeObjectURL(link.href);
      } catch (err) {
        errors.set(`download failed: ${err.message}`);
      }
    });
    return {
      async refresh() {
        const ti = await api(base, { query: instanceQuery });
        if (ti.map_count !== null && ti.map_count !== undefined && mapIndex === null) {
          if (!ctx.isCurrent()) return;
          settled = TERMINAL_TASK_STATES.has(ti.state);
          live = !settled;
          fill(tabs, null);
          fill(meta, fact("Task state", h("span", { "data-testid": "task-state" }, badge(ti.state))));
          status.textContent = "";
          pre.textContent = "";
          fill(instances.body, instancesOf(ti, dagId, runId, taskId));
          instances.el.hidden = false;
          return;
        }
        const tries = triesOf(ti);
        if (selected === null || !tries.some((t) => t.try_number === selected)) {
          selected = tries.length ? tries[tries.length - 1].try_number : null;
        }
        const current = tries.find((t) => t.try_number === selected) || null;
        let text = null;
        let missing = false;
        let complete = null; // X-Leoflow-Log-Complete: false while the try runs or logs are in transit
        let source = null; // X-Leoflow-Log-Source: "pod" (live from the running pod), "stored" or "archive"
        let archivedSize = null;
        if (containersFor !== selected) { // another try: its containers come with its log (below)
          containers = [];
          containersFor = selected;
        }
        if (container !== null && !containers.includes(container)) container = null;
        if (current) {
          const query = container === null ? { try: selected, ...instanceQuery }
            : { try: selected, container, tail: ARCHIVE_VIEW_BYTES, ...instanceQuery };
          try {
            const resp = await api(`${base}/logs`, { query, text: true, withHeaders: true });
            archivedSize = resp.headers.get("X-Leoflow-Log-Size");
            // The try's archived containers (absent without an archive on this cluster).
            const names = resp.headers.get("X-Leoflow-Log-Containers");
            if (names !== null) containers = names.split(",").filter(Boolean);
            text = resp.body;
            const header = resp.headers.get("X-Leoflow-Log-Complete");
            complete = header === null ? null : header === "true";
            source = resp.headers.get("X-Leoflow-Log-Source");
          } catch (err) {
            if (err.status !== 404) throw err;
            missing = true;
          }
        }
        if (!ctx.isCurrent()) return;

        const tryState = current ? current.state : ti.state;
        settled = TERMINAL_TASK_STATES.has(tryState) || Boolean(current && current.ended_at);
        live = complete === null ? !settled : !complete;
        // Redrawn only when they change: a poll must not close a value the reader opened.
        const outputsNow = ti.outputs ? JSON.stringify(ti.outputs) : null;
        if (outputsNow !== shownOutputs) {
          shownOutputs = outputsNow;
          drawOutputs();
        }
        fill(tabs, tries.map((t) => h("button", {
          type: "button", role: "tab", class: `tab ${t.try_number === selected ? "active" : ""}`,
          "aria-selected": t.try_number === selected ? "true" : "false", "data-testid": `try-tab-${t.try_number}`,
          onclick: () => select(t.try_number),
        }, `Try ${t.try_number} `, badge(t.state))));
        containerTabs.hidden = containers.length === 0;
        download.hidden = container === null;
        const containerTab = (name, label) => h("button", {
          type: "button", role: "tab", class: `tab ${container === name ? "active" : ""}`,
          "aria-selected": container === name ? "true" : "false",
          "data-testid": name === null ? "container-tab-default" : `container-tab-${name}`,
          onclick: () => showContainer(name),
        }, label);
        fill(containerTabs, containers.length === 0 ? null : [
          containerTab(null, "Log"), ...containers.map((name) => containerTab(name, `${name} (archive)`))]);
        fill(meta,
          fact("Task state", h("span", { "data-testid": "task-state" }, badge(ti.state))),
          (ti.waiting_for || []).length ? fact("Waiting for", h("ul", { class: "waits", "data-testid": "waiting-for" },
            ti.waiting_for.map((w) => h("li", {}, `[${w.state}] ${w.reason}` + (w.failure ? ` — ${w.failure}` : ""))))) : null,
          current ? [
            fact("Try", `${current.try_number}/${ti.max_tries ?? "?"}`),
            fact("Started", timeEl(current.started_at)),
            fact("Duration", current.started_at ? fmtDuration(secondsBetween(current.started_at, current.ended_at)) : "—"),
            current.exit_code !== null && current.exit_code !== undefined ? fact("Exit code", String(current.exit_code)) : null,
            current.executor_ref ? fact("Executor ref", h("span", { class: "mono" }, current.executor_ref)) : null,
            current.reason ? fact("Reason", current.reason) : null,
          ] : null);

        if (!current) {
          status.textContent = TERMINAL_TASK_STATES.has(ti.state)
            ? "This task finished without running a process, so there is no log."
            : ti.state === "waiting" ? "The task waits for its conditions (Waiting for, above); nothing runs meanwhile."
            : "The task has not started yet; waiting for its first try…";
          pre.textContent = "";
          return;
        }
        const where = source === "pod" ? " Read live from the running pod (its last lines)."
          : source === "archive" ? ` The archived log of container ${container}` +
            (archivedSize !== null && Number(archivedSize) > ARCHIVE_VIEW_BYTES ? `: its last 512 KiB of ${archivedSize} bytes (Download for all).` : ".")
            : "";
        status.textContent = live ? `Live — refreshing every second.${where}`
          : (missing || !text ? "No log output was captured." : `Complete.${where}`);
        status.dataset.source = source || "";
        status.dataset.live = live ? "true" : "false";
        const shown = text ?? "";
        if (shown !== lastText) {
          lastText = shown;
          drawLog(false);
          if (follow.checked) pre.scrollTop = pre.scrollHeight;
        }
        eventPolls += 1;
        if (eventsFor !== selected || (live && eventPolls >= EVENT_POLLS)) {
          const which = selected;
          eventPolls = 0;
          const kept = await api(`${base}/events`, { query: { try: which, ...instanceQuery } });
          if (!ctx.isCurrent() || which !== selected) return;
          eventsFor = which;
          events.el.hidden = kept.events.length === 0;
          fill(events.body, table(EVENT_COLUMNS, kept.events, {
            testid: "pod-events-table",
            rowAttrs: (e) => ({ class: e.type === "Warning" ? "warning" : "", "data-reason": e.reason }),
          }));
        }
        if (artifactsFor !== `${selected}:${live}`) { // on another try, and once more when it ends
          const which = selected;
          const listed = await api(`${base}/artifacts`, { query: { try: which, ...instanceQuery } });
          if (!ctx.isCurrent() || which !== selected) return;
          artifactsFor = `${which}:${live}`;
          artifacts.el.hidden = listed.artifacts.length === 0;
          fill(artifacts.body, table(artifactColumns(which), listed.artifacts, {
            testid: "artifacts-table", rowAttrs: (a) => ({ "data-artifact": a.name }),
          }));
        }
      },
      pollMs: () => (live || !settled ? LIVE_POLL_MS : IDLE_POLL_MS),
    };
  },
};
