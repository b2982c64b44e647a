// Audit log: every API write — who (token name), what, when, from where, with which answer.
// Admin tokens only: read tokens get the API's 403, shown as a notice.

import { api, ApiError, items } from "../api.js";
import { fill, h } from "../dom.js";
import { fmtTime, timeEl } from "../format.js";
import { changeGate, section, table } from "../ui.js";

const LIMIT = 200;

function statusBadge(status) {
  const kind = status < 300 ? "success" : status < 500 ? "failed" : "cancelled";
  return h("span", { class: `badge st-${kind}`, "data-state": String(status) }, String(status));
}

export default {
  title: () => "Audit",
  mount(root, _params, ctx) {
    const actor = h("input", { type: "search", placeholder: "token name", "data-testid": "audit-actor",
      value: ctx.query.get("actor") || "" });
    const dag = h("input", { type: "search", placeholder: "DAG id", "data-testid": "audit-dag",
      value: ctx.query.get("dag") || "" });
    for (const input of [actor, dag]) input.addEventListener("change", () => ctx.refresh());
    const list = section("API writes", { testid: "audit", actions: h("div", { class: "filters" }, actor, dag) });
    fill(root, h("div", { class: "page-head" }, h("h1", {}, "Audit")), list.el);
    const changed = changeGate();
    return {
      async refresh() {
        let events;
        try {
          events = items(await api("/audit", { query: { limit: LIMIT, actor: actor.value.trim(), dag_id: dag.value.trim() } }));
        } catch (err) {
          if (err instanceof ApiError && err.status === 403) {
            fill(list.body, h("p", { class: "notice notice-info", "data-testid": "audit-forbidden" },
              "The audit log needs an admin token."));
            return;
          }
          throw err;
        }
        if (!ctx.isCurrent() || !changed([events, actor.value, dag.value])) return;
        fill(list.body, table([
          { title: "When", cell: (e) => h("span", { title: fmtTime(e.ts) }, timeEl(e.ts)) },
          { title: "Who", cell: (e) => h("strong", {}, e.actor) },
          { title: "What", cell: (e) => h("code", { class: "wrap" }, `${e.method} ${e.path}`) },
          // A token's refusals (403) are counted, one event per route and hour: show how many.
          { title: "Answer", cell: (e) => (e.count > 1
            ? h("span", { title: `${e.count} refusals, the last ${fmtTime(e.last_ts)}` }, statusBadge(e.status), ` ×${e.count}`)
            : statusBadge(e.status)) },
          { title: "From", class: "opt", cell: (e) => e.remote_addr || "—" },
          { title: "Details", class: "opt", cell: (e) => (e.details && Object.keys(e.details).length
            ? h("code", { class: "small" }, JSON.stringify(e.details)) : "") },
        ], events, { empty: "No API writes recorded yet.", testid: "audit-table",
          rowAttrs: (e) => ({ "data-actor": e.actor }) }));
      },
    };
  },
};
