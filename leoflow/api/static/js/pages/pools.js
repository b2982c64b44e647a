// Pools: every pool with its slots, the slots in use and the ready tasks waiting for one.
// The default pool is built in (LEOFLOW_PARALLELISM); a "missing" pool is named by tasks but
// does not exist, which is why those tasks wait. Changes go through `leoflow pools ...`.

import { api, items } from "../api.js";
import { fill, h } from "../dom.js";
import { changeGate, section, table } from "../ui.js";

function usage(p) {
  // A pool without slots (0, or missing) shows an empty meter: nothing of it is in use.
  const pct = p.slots > 0 ? Math.min(100, Math.round((100 * p.occupied_slots) / p.slots)) : 0;
  return h("span", { class: "pool-usage", title: `${p.running_slots} running, ${p.queued_slots} queued` },
    h("meter", { min: "0", max: "100", value: String(pct) }), ` ${p.occupied_slots} / ${p.slots}`);
}

function kind(p) {
  if (p.builtin) return h("span", { class: "badge", title: "Its size is LEOFLOW_PARALLELISM" }, "built in");
  if (p.missing) return h("span", { class: "badge st-failed", title: "Tasks name this pool but it does not exist" },
    "missing");
  return "";
}

export default {
  title: () => "Pools",
  mount(root) {
    const list = section("Slots in use and tasks waiting for one", { testid: "pools" });
    fill(root, h("div", { class: "page-head" }, h("h1", {}, "Pools")), list.el);
    const changed = changeGate();
    return {
      async refresh() {
        const pools = items(await api("/pools"));
        if (!changed(pools)) return;
        fill(list.body, table([
          { title: "Pool", cell: (p) => h("strong", {}, p.name) },
          { title: "Slots in use", cell: usage },
          { title: "Open", cell: (p) => String(p.open_slots) },
          { title: "Waiting", cell: (p) => String(p.waiting_tasks) },
          { title: "", cell: kind },
          { title: "Description", class: "opt", cell: (p) => p.description || "" },
        ], pools, { empty: "No pools.", testid: "pools-table", rowAttrs: (p) => ({ "data-pool": p.name }) }));
      },
    };
  },
};
