// DAG list: schedule, paused toggle (admins only), last run state, next run time; paged (previous /
// next, PAGE_SIZE a page, keyset cursors from the API) and searched by id prefix as one types.

import { api, enc, items } from "../api.js";
import { fill, h, href } from "../dom.js";
import { badge, scheduleText, timeEl } from "../format.js";
import { changeGate, notice, table } from "../ui.js";

const PAGE_SIZE = 50;
const PREFIX_MAX = 50; // the longest DAG id; the API refuses a longer prefix
const SEARCH_DEBOUNCE_MS = 250; // one request per pause in typing, not per key
const MAX_FOLLOW = 10; // requests one page may take when a filtered answer comes back short

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

/** A page of the list: up to PAGE_SIZE DAGs from cursor on, and the cursor of the page after it. */
async function fetchPage(prefix, cursor) {
  // A filtered answer may be short, even empty, and still name a next cursor: the server examines
  // a bounded number of DAGs per request. Follow it (a few times) to fill the page.
  let rows = [];
  let next = cursor;
  for (let i = 0; i < MAX_FOLLOW && rows.length < PAGE_SIZE; i += 1) {
    const body = await api("/dags", { query: { limit: PAGE_SIZE - rows.length, prefix, cursor: next } });
    rows = rows.concat(items(body, "dags"));
    next = body.next_cursor || null;
    if (!next) break;
  }
  return { rows, next };
}

export default {
  title: () => "DAGs",
  mount(root, _params, ctx) {
    const errors = notice();
    const body = h("div", { class: "card", "data-testid": "dags" });
    const search = h("input", {
      type: "search", class: "dag-search", placeholder: "Filter by DAG id prefix", maxlength: String(PREFIX_MAX),
      autocomplete: "off", autocapitalize: "off", spellcheck: "false", "aria-label": "Filter DAGs by id prefix",
      "data-testid": "dag-search", value: ctx.query.get("prefix") || "",
    });
    const prev = h("button", { type: "button", class: "secondary", "data-testid": "dags-prev" }, "‹ Previous");
    const next = h("button", { type: "button", class: "secondary", "data-testid": "dags-next" }, "Next ›");
    const where = h("span", { class: "muted pager-where", "data-testid": "dags-page" });
    const pager = h("div", { class: "pager", "data-testid": "dags-pager" }, prev, where, next);
    fill(root, h("div", { class: "page-head" }, h("h1", {}, "DAGs"), search), errors.el, body, pager);
    const changed = changeGate();
    // The page shown: where it starts (null: the first), the starts of the pages before it, and
    // the cursor of the page after it (null: this is the last).
    let prefix = search.value.trim();
    let start = null;
    const before = [];
    let after = null;
    let loads = 0; // answers to a superseded request (an older prefix or page) are dropped

    const go = (cursor, history) => {
      // Until the page arrives, its own cursors are unknown: a second click on Next would reuse the
      // shown page's cursor and label that page as the one after it.
      prev.disabled = true;
      next.disabled = true;
      start = cursor;
      before.splice(0, before.length, ...history);
      ctx.refresh();
    };
    prev.addEventListener("click", () => { if (before.length) go(before[before.length - 1], before.slice(0, -1)); });
    next.addEventListener("click", () => { if (after) go(after, [...before, start]); });
    let typing = null;
    search.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        if (search.value.trim() === prefix) return;
        prefix = search.value.trim();
        history.replaceState(null, "", prefix ? `#/dags?prefix=${encodeURIComponent(prefix)}` : "#/dags");
        go(null, []);
      }, SEARCH_DEBOUNCE_MS);
    });

    return {
      async refresh() {
        const load = ++loads;
        const page = await fetchPage(prefix, start);
        // The pause switch only on the DAGs the caller may operate (its role on each DAG's team).
        const operable = await ctx.operable(page.rows.map((d) => d.dag_id));
        if (load !== loads || !ctx.isCurrent()) return;
        after = page.next;
        prev.disabled = before.length === 0;
        next.disabled = !after;
        pager.hidden = before.length === 0 && !after;
        const first = before.length * PAGE_SIZE + 1;
        where.textContent = page.rows.length ? `${first}–${first + page.rows.length - 1}` : "";
        if (!changed([prefix, start, page.rows, [...operable]])) return;
        const empty = prefix ? `No DAG id starts with “${prefix}”.` : "No DAGs yet. Apply one with `leoflow dags apply FILE`.";
        fill(body, table([
          { title: "DAG", cell: (d) => h("a", { href: href("dags", d.dag_id), class: "strong", "data-testid": `dag-link-${d.dag_id}` }, d.dag_id) },
          { title: "Schedule", cell: (d) => scheduleText(d.schedule) ? h("code", {}, scheduleText(d.schedule)) : h("span", { class: "muted" }, "manual") },
          { title: "Active", cell: (d) => pausedControl(d, { ...ctx, canWrite: operable.has(d.dag_id) }, errors.set) },
          { title: "Last run", cell: (d) => d.last_run_id
            ? h("a", { href: href("dags", d.dag_id, "runs", d.last_run_id), title: d.last_run_id }, badge(d.last_run_state))
            : h("span", { class: "muted" }, "never") },
          { title: "Next run", cell: (d) => d.paused ? h("span", { class: "muted" }, "paused") : timeEl(d.next_run_at) },
        ], page.rows, { empty, testid: "dags-table", rowAttrs: (d) => ({ "data-dag": d.dag_id }) }));
      },
    };
  },
};
