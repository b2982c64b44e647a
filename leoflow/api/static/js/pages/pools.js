// Pools: every pool with its slots, the slots in use and the ready tasks waiting for one.
// The default pool is built in (LEOFLOW_PARALLELISM); a "missing" pool is named by tasks but
// does not exist, which is why those tasks wait. Admins create, resize and delete pools here
// too (the same API as `leoflow pools ...`); a missing pool's "Create" fills the form for it.

import { api, enc, items } from "../api.js";
import { fill, h } from "../dom.js";
import { changeGate, confirmButton, notice, section, table } from "../ui.js";

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

/** Create a pool, or resize and re-describe one that exists (PATCH), from one form. */
function poolForm(known, ctx, message) {
  const name = h("input", { name: "name", required: true, maxlength: 63, "data-testid": "pool-name" });
  const slots = h("input", { type: "number", name: "slots", min: 0, max: 100000, required: true, value: "1",
    "data-testid": "pool-slots" });
  const description = h("input", { name: "description", maxlength: 500, "data-testid": "pool-description" });
  const submit = h("button", { type: "submit", class: "primary", "data-testid": "pool-submit" }, "Save pool");
  const form = h("form", { class: "trigger-form", novalidate: true, "data-testid": "pool-form" },
    h("div", { class: "form-row" }, h("label", {}, "Pool", name), h("label", {}, "Slots", slots),
      h("label", {}, "Description", description)),
    h("div", { class: "actions" }, submit));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    const body = { slots: Number(slots.value), description: description.value || null };
    try {
      if (known().has(name.value)) {
        await api(`/pools/${enc(name.value)}`, { method: "PATCH", body });
        message.set(`Pool ${name.value} resized to ${body.slots} slots.`, "info");
      } else {
        await api("/pools", { method: "POST", body: { name: name.value, ...body } });
        message.set(`Pool ${name.value} created with ${body.slots} slots.`, "info");
      }
      await ctx.refresh();
    } catch (err) {
      message.set(err.message); // the API's 4xx names the field
    } finally {
      submit.disabled = false;
    }
  });
  const edit = (p) => { name.value = p.name; slots.value = String(p.missing ? 1 : p.slots); description.value = p.description || ""; slots.focus(); };
  return { form, edit };
}

export default {
  title: () => "Pools",
  mount(root, _params, ctx) {
    const list = section("Slots in use and tasks waiting for one", { testid: "pools" });
    const message = notice();
    message.el.dataset.testid = "pool-message";
    let existing = new Set();
    const editor = ctx.canWrite ? poolForm(() => existing, ctx, message) : null;
    fill(root, h("div", { class: "page-head" }, h("h1", {}, "Pools")), message.el, editor ? editor.form : null, list.el);
    const changed = changeGate();
    const actions = (p) => {
      if (!editor || p.builtin) return "";
      const change = h("button", { type: "button", class: "secondary", "data-testid": "pool-edit",
        onclick: () => editor.edit(p) }, p.missing ? "Create" : "Resize");
      if (p.missing) return change;
      return h("span", {}, change, " ", confirmButton("Delete", `Delete ${p.name}`, async () => {
        try {
          await api(`/pools/${enc(p.name)}`, { method: "DELETE" });
          message.set(`Pool ${p.name} deleted.`, "info");
          await ctx.refresh();
        } catch (err) {
          message.set(err.message);
        }
      }, { testid: "pool-delete" }));
    };
    return {
      async refresh() {
        const pools = items(await api("/pools"));
        existing = new Set(pools.filter((p) => !p.missing && !p.builtin).map((p) => p.name));
        if (!changed(pools)) return;
        fill(list.body, table([
          { title: "Pool", cell: (p) => h("strong", {}, p.name) },
          { title: "Slots in use", cell: usage },
          { title: "Open", cell: (p) => String(p.open_slots) },
          { title: "Waiting", cell: (p) => String(p.waiting_tasks) },
          { title: "", cell: kind },
          { title: "Description", class: "opt", cell: (p) => p.description || "" },
          ...(editor ? [{ title: "", cell: actions }] : []),
        ], pools, { empty: "No pools.", testid: "pools-table", rowAttrs: (p) => ({ "data-pool": p.name }) }));
      },
    };
  },
};
