// API tokens: the usable runtime tokens (never a secret: their first characters, role, team,
// expiry and last use), a form that creates one and shows its secret this once, and revoke.
// The same API as `leoflow tokens ...`; shown to admins (the nav link is admin-only).

import { api, enc, items } from "../api.js";
import { fill, h } from "../dom.js";
import { changeGate, confirmButton, notice, section, table } from "../ui.js";
import { timeEl } from "../format.js";

const ROLES = ["viewer", "operator", "editor", "admin"];

/** The create form; the answer's secret goes to `reveal`, the only place it is ever shown. */
function tokenForm(ctx, message, reveal) {
  const name = h("input", { name: "name", required: true, maxlength: 50, "data-testid": "apitoken-name" });
  const role = h("select", { name: "role", "data-testid": "apitoken-role" },
    ...ROLES.map((r) => h("option", { value: r }, r)));
  const team = h("input", { name: "team", maxlength: 50, placeholder: "(none)", "data-testid": "apitoken-team" });
  const days = h("input", { type: "number", name: "expires_in_days", min: 1, max: 3650, required: true,
    value: "30", "data-testid": "apitoken-days" });
  const submit = h("button", { type: "submit", class: "primary", "data-testid": "apitoken-submit" }, "Create token");
  const form = h("form", { class: "trigger-form", novalidate: true, "data-testid": "apitoken-form" },
    h("div", { class: "form-row" }, h("label", {}, "Name", name), h("label", {}, "Role", role),
      h("label", {}, "Team", team), h("label", {}, "Expires in days", days)),
    h("div", { class: "actions" }, submit));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    const body = { name: name.value, role: role.value, expires_in_days: Number(days.value) };
    if (team.value) body.team = team.value;
    try {
      const created = await api("/tokens", { method: "POST", body });
      message.set(`Token ${created.name} created (id ${created.id}). Copy its secret now: it is not shown again.`,
        "info");
      reveal(created.secret);
      name.value = "";
      await ctx.refresh();
    } catch (err) {
      message.set(err.message); // the API's 4xx names the field
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export default {
  title: () => "API tokens",
  mount(root, _params, ctx) {
    const list = section("Usable tokens", { testid: "tokens" });
    const message = notice();
    message.el.dataset.testid = "apitoken-message";
    const secret = h("output", { class: "apitoken-secret", "data-testid": "apitoken-secret" });
    const shown = h("div", { class: "card", hidden: true }, h("strong", {}, "Secret (shown once): "), secret);
    const reveal = (value) => { secret.textContent = value; shown.hidden = false; };
    const form = ctx.canWrite ? tokenForm(ctx, message, reveal) : null;
    fill(root, h("div", { class: "page-head" }, h("h1", {}, "API tokens")), message.el, shown, form, list.el);
    const changed = changeGate();
    const revoke = (t) => confirmButton("Revoke", `Revoke ${t.name}`, async () => {
      try {
        await api(`/tokens/${enc(t.id)}`, { method: "DELETE" });
        message.set(`Token ${t.name} revoked: every replica refuses it within a second.`, "info");
        await ctx.refresh();
      } catch (err) {
        message.set(err.message);
      }
    }, { testid: "apitoken-revoke" });
    return {
      async refresh() {
        const tokens = items(await api("/tokens"));
        if (!changed(tokens)) return;
        fill(list.body, table([
          { title: "Name", cell: (t) => h("strong", {}, t.name) },
          { title: "Role", cell: (t) => t.role },
          { title: "Team", cell: (t) => t.team || "—" },
          { title: "Starts with", class: "opt", cell: (t) => h("code", {}, `${t.prefix}…`) },
          { title: "Expires", cell: (t) => timeEl(t.expires_at) },
          { title: "Last used", cell: (t) => (t.last_used_at ? timeEl(t.last_used_at) : "never") },
          { title: "Created by", class: "opt", cell: (t) => t.created_by },
          ...(ctx.canWrite ? [{ title: "", cell: revoke }] : []),
        ], tokens, { empty: "No tokens.", testid: "tokens-table", rowAttrs: (t) => ({ "data-token": t.name }) }));
      },
    };
  },
};
